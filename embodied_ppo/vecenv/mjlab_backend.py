"""The `env.backend: mjlab` vector env: one mjlab `ManagerBasedRlEnv` stepping every env at once
on the training device (MuJoCo Warp), behind `DeviceVecEnv`.

Observations stay torch tensors on the device: mjlab's observation groups are the keys of a
Dict observation (`actor`, `critic`, ...), actions go in as device tensors, and nothing is
copied to the host per step but the number of truncated episodes (mjlab itself reads the
number of ended ones to reset them).

Episode ends follow docs/design.md, rule 1. mjlab's `terminated` is a termination (a fall:
bootstrap 0), its `truncated` a time-out (`time_out` terms: bootstrap V(final_obs)); a task
with `is_finite_horizon` reports its time limit as a termination. mjlab's own auto-reset would
return the reset observation of an env whose episode ended, and a time-out's final observation
would be lost (its rsl_rl recipe bootstraps a time-out with the value of the observation before
the last step instead). So mjlab's auto-reset takes the terminations inside its step, and the
truncations are held back (`mjlab_resets.EpisodeEnds`): `step` reads their final observations
and then resets them itself (`reset(env_ids)`, mjlab's reset path: events, commands and
observation histories as in its auto-reset), so the observations it hands back are the reset
ones (same-step autoreset), and the second forward pass a reset after the step costs is paid
only on steps where an episode was truncated.

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
from embodied_ppo.vecenv.mjlab_resets import EpisodeEnds, Log, merge_logs, per_episode
from embodied_ppo.vecenv.mjlab_tasks import (
    build,
    is_out_of_memory,
    memory_error,
    quietly,
    space_info,
    task_config,
)
from embodied_ppo.vecenv.object_state import Uncapturable
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
        self.ends = EpisodeEnds(self.env)
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
        """Step every env with `action` (N, A); reset the envs whose episode ended (the
        terminated ones inside mjlab's step, the truncated ones after it)."""
        self.ends.begin()
        try:
            obs, reward, terminated, truncated, extras = self.env.step(action)
        except Exception as exc:
            raise TrainingError(
                f"environment step failed ({type(exc).__name__}: {first_line(exc)}) {self._where()}"
            ) from exc
        self.ends.after_step()
        self.steps += 1
        fell = self.ends.reset_envs  # reset inside the step (host int: mjlab read it)
        logs = [(per_episode(extras.get("log", {}), fell), fell)]
        obs = self._obs(obs)
        reward = reward.to(torch.float32, copy=True)  # mjlab's buffer, which its next step writes
        if self.ends.finite_horizon:  # the time limit ends the task: a termination
            terminated, truncated = terminated | truncated, torch.zeros_like(truncated)
        else:
            terminated, truncated = terminated.clone(), truncated & ~terminated
        self._ep_return += reward
        self._ep_length += 1
        result = DeviceStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs={},
            episode_return=self._ep_return.clone(),
            episode_length=self._ep_length.clone(),
        )
        cut = truncated.nonzero().squeeze(-1)  # the step's one host read of ours
        if cut.numel():
            result.final_obs = {k: v[cut] for k, v in obs.items()}  # a copy, before the reset
            result.final_ids = cut
            result.obs, log = self._reset_truncated(obs, cut)
            logs.append((log, int(cut.numel())))
        result.ended = fell + int(cut.numel())
        if result.ended:
            result.log = merge_logs(logs)
            ended = terminated | truncated
            self._ep_return.masked_fill_(ended, 0.0)
            self._ep_length.masked_fill_(ended, 0)
        return result

    def _reset_truncated(self, obs: DeviceObs, ids: torch.Tensor) -> tuple[DeviceObs, Log]:
        """Reset the envs `ids` (K,) after their final observations were read: the observations
        with those rows reset (the others as the step left them), and the reset's episode log."""
        try:
            reset_obs, extras = self.env.reset(env_ids=ids)
        except Exception as exc:
            raise TrainingError(
                f"environment reset failed ({type(exc).__name__}: {first_line(exc)}) "
                f"{self._where()}"
            ) from exc
        # The reset computes every env's observation terms again (with fresh noise); the envs it
        # did not reset keep the observation of the step, as mjlab's auto-reset gives them.
        rows = {k: v.index_copy(0, ids, reset_obs[k][ids]) for k, v in obs.items()}
        return rows, per_episode(extras.get("log", {}), int(ids.numel()))

    # ------------------------------------------------------------------ resume
    def get_state(self) -> CheckpointState:
        """The envs mid-episode (mjlab's simulation and managers), episode statistics, steps;
        where a part cannot be captured, why (a resume then starts fresh episodes and says so)."""
        try:
            members = mjlab_state.capture(self.env)
        except Uncapturable as exc:
            return {"members": None, "not_captured": f"mjlab env state: {exc}", "steps": self.steps}
        return {
            "members": members,
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
