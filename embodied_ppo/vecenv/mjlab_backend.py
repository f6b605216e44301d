"""The `env.backend: mjlab` vector env: one mjlab `ManagerBasedRlEnv` stepping every env at once
on the training device (MuJoCo Warp), behind `DeviceVecEnv`.

Observations stay torch tensors on the device: mjlab's observation groups are the keys of a
Dict observation (`actor`, `critic`, ...), actions go in as device tensors, and nothing is
copied to the host per step but the number of episodes that ended (mjlab itself reads it to
reset them).

Episode ends follow docs/design.md, rule 1. mjlab's own auto-reset would return the reset
observation of an env whose episode ended, and its final observation would be lost (its rsl_rl
recipe bootstraps a time-out with the value of the observation before the last step instead).
The backend therefore turns mjlab's auto-reset off: `step` returns the true final observations,
the backend keeps them as `final_obs` and then resets the ended envs itself (`reset(env_ids)`,
mjlab's reset path: events, commands and observation histories as in its auto-reset), so the
observations it hands back are the reset ones (same-step autoreset). mjlab's `terminated` is a
termination (a fall: bootstrap 0), its `truncated` a time-out (`time_out` terms: bootstrap
V(final_obs)); a task with `is_finite_horizon` reports its time limit as a termination.

mjlab draws every random number (commands, pushes, domain randomization, observation noise)
from torch's global generator, which it seeds with the env seed; the run's checkpoint carries
that generator (io.rng), and `get_state` the envs mid-episode (env.mjlab_state).
"""

from __future__ import annotations

from typing import Any, Final

import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.vecenv import mjlab_state
from embodied_ppo.vecenv.device_protocol import DeviceObs, DeviceStep
from embodied_ppo.vecenv.mjlab_tasks import (
    build,
    is_out_of_memory,
    memory_error,
    quietly,
    space_info,
    task_config,
)
from embodied_ppo.vecenv.seeding import env_seeds, episode_start_seed


def mjlab_seed(seed: int, env_offset: int = 0) -> int:
    """The one seed of a process's batch of mjlab envs, from the run seed (mjlab seeds a batch,
    not each env; a distributed run's processes get different ones)."""
    return env_seeds(seed, 1, env_offset)[0]


class MjlabVecEnv:
    """mjlab's batched env with the semantics of VecEnv, in device tensors (module docstring)."""

    on_device: Final = True  # a device env (vecenv.device_protocol.DeviceVecEnv)

    def __init__(
        self,
        cfg: EnvConfig,
        seed: int,
        env_offset: int = 0,
        device: torch.device | None = None,
    ) -> None:
        self.cfg = cfg
        self.device = device or torch.device("cpu")
        self.num_envs = cfg.num_envs
        self.seed = mjlab_seed(seed, env_offset)
        try:
            self.env: Any = build(task_config(cfg, cfg.num_envs, self.seed), self.device)
        except Exception as exc:
            if is_out_of_memory(exc):
                raise memory_error(cfg, self.device, exc) from None
            raise
        self.info = space_info(self.env, str(cfg.id))
        self.keys = list(self.info.obs_keys or {})
        self._ep_return = torch.zeros(self.num_envs, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.steps = 0  # vector steps taken in this run (restored on resume); for error messages

    def _where(self) -> str:
        step = self.steps + 1
        return f"at step {step} (global step {step * self.num_envs:,})"

    def _obs(self, obs: dict[str, torch.Tensor]) -> DeviceObs:
        """The observation groups the policy takes (mjlab's dict may be reused by mjlab)."""
        return {k: obs[k] for k in self.keys}

    def reset(self, seeds: list[int] | None = None) -> DeviceObs:
        """Reset every env, seeding mjlab with `seeds[0]` (default: the run's env seed)."""
        seed = int(seeds[0]) % 2**32 if seeds else self.seed
        try:
            obs, _ = quietly(self.env.reset, seed=seed)
        except Exception as exc:
            raise TrainingError(
                f"environment reset failed ({type(exc).__name__}: {first_line(exc)})"
            ) from exc
        self._ep_return.zero_()
        self._ep_length.zero_()
        if self.cfg.random_episode_start:
            self._spread_episode_starts(seed)
        return self._obs(obs)

    def _spread_episode_starts(self, seed: int) -> None:
        """Put each env at a random step of its first episode, uniform over [0, time limit), so
        their time limits fall on different steps (env.random_episode_start). Drawn from a
        generator of its own, seeded from the reset's seed through a derivation of its own, so it
        is neither the global generator mjlab draws from nor a copy of its stream; the episode
        statistics still count the first episodes from the reset."""
        steps = self.env.episode_length_buf
        generator = torch.Generator(device=steps.device).manual_seed(episode_start_seed(seed))
        start = torch.randint(
            0,
            int(self.env.max_episode_length),
            steps.shape,
            generator=generator,
            device=steps.device,
            dtype=steps.dtype,
        )
        steps.copy_(start)

    def step(self, action: torch.Tensor) -> DeviceStep:
        """Step every env with `action` (N, A); reset the envs whose episode ended."""
        try:
            obs, reward, terminated, truncated, _ = self.env.step(action)
        except Exception as exc:
            raise TrainingError(
                f"environment step failed ({type(exc).__name__}: {first_line(exc)}) {self._where()}"
            ) from exc
        self.steps += 1
        obs = self._obs(obs)
        reward = reward.float()
        finite = torch.isfinite(reward).all()
        for v in obs.values():
            finite = finite & torch.isfinite(v).all()
        self._ep_return += reward
        self._ep_length += 1
        ended = terminated | truncated
        ids = ended.nonzero().squeeze(-1)  # mjlab reads the same on the host to reset
        episode_return, episode_length = self._ep_return.clone(), self._ep_length.clone()
        result = DeviceStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=obs,
            episode_return=episode_return,
            episode_length=episode_length,
            finite=finite,
        )
        if ids.numel():
            # A copy: a group with history is a view of mjlab's history buffer, which the
            # reset writes.
            result.final_obs = {k: v.clone() for k, v in obs.items()}
            try:
                reset_obs, extras = self.env.reset(env_ids=ids)
            except Exception as exc:
                raise TrainingError(
                    f"environment reset failed ({type(exc).__name__}: {first_line(exc)}) "
                    f"{self._where()}"
                ) from exc
            # The reset computes every env's observations; the envs that did not end keep
            # their own (their history buffers were not advanced by it).
            result.obs = self._obs(reset_obs)
            result.ended = int(ids.numel())
            result.log = {
                str(k): torch.as_tensor(v, dtype=torch.float32, device=self.device)
                for k, v in extras.get("log", {}).items()
            }
            self._ep_return.masked_fill_(ended, 0.0)
            self._ep_length.masked_fill_(ended, 0)
        return result

    # ------------------------------------------------------------------ resume
    def get_state(self) -> CheckpointState:
        """The envs mid-episode (mjlab's simulation and managers), episode statistics, steps."""
        return {
            "members": mjlab_state.capture(self.env),
            "ep_return": self._ep_return.cpu().clone(),
            "ep_length": self._ep_length.cpu().clone(),
            "steps": self.steps,
        }

    def set_state(self, state: CheckpointState) -> str | None:
        """Restore `get_state()`; returns why the envs could not be restored, or None."""
        self.steps = int(state["steps"])
        members = state.get("members")
        if members is None:
            return state.get("not_captured") or "the checkpoint holds no environment state"
        reason = mjlab_state.restore(self.env, members)
        if reason is not None:
            return reason
        self._ep_return.copy_(state["ep_return"])
        self._ep_length.copy_(state["ep_length"])
        return None

    def set_steps(self, steps: int) -> None:
        """The vector steps taken so far in the run (they number the steps in error messages)."""
        self.steps = steps

    def close(self) -> None:
        """Close mjlab's env (its renderer, if any); closing twice does nothing."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def __enter__(self) -> MjlabVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
