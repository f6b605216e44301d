"""Rollout collection from an env that lives on the training device (`env.DeviceVecEnv`, e.g.
mjlab): observations, actions and the whole rollout stay device tensors, written straight into
the buffer; the policy acts in torch. Nothing goes to the host per step; the episodes'
statistics and the finiteness check are read once per rollout.

The semantics are `Collector`'s (docs/design.md, rules 1 and 2): a truncated episode is
bootstrapped with V(final_obs), a terminated one with 0; the policy is fixed during a rollout;
before the run's first rollout the normalizers take the observations every env starts from.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.collector import CollectorSettings, RolloutStats
from embodied_ppo.vecenv.device_protocol import DeviceObs, DeviceStep, DeviceVecEnv
from embodied_ppo.vecenv.seeding import warm_up_seed

# A truncation's final observations: (step t, (N,) bool rows truncated at t, observations).
Final = tuple[int, torch.Tensor, DeviceObs]


def device_noise(
    policy: ActorCritic,
    steps: int,
    num_envs: int,
    seed: int,
    device: torch.device,
    env_offset: int = 0,
    total_envs: int | None = None,
) -> torch.Tensor:
    """A rollout's sampling noise (T, N, ...) drawn on `device` from `seed`: the noise of global
    env k at step t depends on (seed, t, k, total_envs) and the device's generator only."""
    generator = torch.Generator(device).manual_seed(seed)
    total = total_envs or num_envs
    every = policy.sample_noise(steps * total, device, generator)
    every = every.reshape(steps, total, *every.shape[1:])
    return every[:, env_offset : env_offset + num_envs]


class DeviceCollector:
    """Fills a RolloutBuffer by stepping a device env with `policy` (feed-forward policies,
    continuing rollouts)."""

    def __init__(
        self,
        envs: DeviceVecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        settings: CollectorSettings,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.reward_scaler, self.settings = reward_scaler, settings
        self.device = settings.device
        self.micro_batch = settings.micro_batch or envs.num_envs
        self.obs: DeviceObs | None = None  # (N, ...): what the policy acts on next
        self.merged = False  # the last rollout's observations are in the normalizers
        T, N = buffer.num_steps, envs.num_envs
        # The raw return and length of the episode that ended at each step (where one did).
        self.episode_returns = torch.zeros(T, N, device=self.device)
        self.episode_lengths = torch.zeros(T, N, dtype=torch.int64, device=self.device)

    # ------------------------------------------------------------------ env state
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's seed) and keep the first observation."""
        self.obs = self.envs.reset(seeds)

    def state(self) -> CheckpointState:
        """The envs mid-episode and the observation acted on next (checkpoint-safe)."""
        obs = None if self.obs is None else {k: v.cpu().clone() for k, v in self.obs.items()}
        return {"envs": self.envs.get_state(), "obs": obs, "recurrent": None}

    def restore(
        self, state: CheckpointState | None, fresh_seeds: list[int], steps: int
    ) -> str | None:
        """Put the envs back where `state()` left them; returns why that failed, or None (then
        the envs start fresh episodes from `fresh_seeds`, see `Collector.restore`).

        A device env may seed the global generators when it resets (mjlab does): they are kept
        as the checkpoint restored them, since the env draws from them as it steps on.
        """
        with torch.random.fork_rng(devices=_cuda_devices(self.device)), _numpy_rng_kept():
            self.start(fresh_seeds)
        saved = None if state is None else state.get("envs")
        obs = None if state is None else state.get("obs")
        if saved is None or obs is None:
            reason = "the checkpoint holds no environment state"
        else:
            reason = self.envs.set_state(saved)
            if reason is None:
                self.obs = {k: v.to(self.device) for k, v in obs.items()}
                return None
            self.start(fresh_seeds)  # undo a partial restore
        self.envs.set_steps(steps)
        self.reward_scaler.reset_returns()
        return reason

    # ------------------------------------------------------------------ the rollout
    # no_grad rather than inference_mode: mjlab keeps tensors it creates while stepping as its
    # state, and later updates them in place outside of collection (resets, restores).
    @torch.no_grad()
    def collect(
        self, episode_seeds: list[int] | None = None, noise_seed: int | None = None
    ) -> RolloutStats:
        """Run `buffer.num_steps` vector steps and fill every buffer field but advantages."""
        assert episode_seeds is None, "device envs collect continuing rollouts (config checks)"
        assert self.obs is not None, "call start() first"
        buf, s, policy = self.buffer, self.settings, self.policy
        T, N = buf.num_steps, self.envs.num_envs
        seed = noise_seed if noise_seed is not None else int(torch.randint(2**62, ()).item())
        if policy.needs_obs_statistics():
            self._warm_up(warm_up_seed(seed))
        noise = device_noise(policy, T, N, seed, self.device, s.env_offset, s.total_envs)
        keep_finals = s.keep_bootstrap_obs
        finals: list[Final] = []
        logs: dict[str, list[tuple[torch.Tensor, int]]] = {}
        finite = torch.ones((), dtype=torch.bool, device=self.device)
        self.merged = False
        buf.final_values.zero_()
        buf.mask.fill_(1.0)
        obs = self.obs
        for t in range(T):
            for k, v in obs.items():
                buf.obs[k][t] = v
            self._act(obs, noise[t], t)
            res = self.envs.step(buf.actions[t])
            self._record(t, res, keep_finals, finals)
            for key, value in res.log.items():
                logs.setdefault(key, []).append((value, res.ended))
            if res.finite is not None:
                finite &= res.finite
            obs = res.obs
        self.obs = obs
        if not bool(finite):  # one host read per rollout
            raise TrainingError(
                "the environment returned a non-finite observation or reward during this rollout"
            )
        buf.finalize_next_values(self._values(obs))
        if s.keep_bootstrap_obs:
            buf.keep_bootstrap_obs(
                {k: v.clone() for k, v in obs.items()},
                [(t, rows.nonzero().squeeze(-1), _rows(o, rows)) for t, rows, o in finals],
            )
        buf.rewards.copy_(self.reward_scaler.scale_rollout(buf.rewards, buf.ends, None, s.reduce))
        return self._stats(T * N, logs)

    def _warm_up(self, seed: int) -> None:
        """Before a run's first rollout, its normalizers empty: the policy acts for one
        rollout's length, nothing of it trained on, and its observations become the statistics
        (as the host collector's Collector._warm_up)."""
        assert self.obs is not None
        s, policy = self.settings, self.policy
        T, N = self.buffer.num_steps, self.envs.num_envs
        noise = device_noise(policy, T, N, seed, self.device, s.env_offset, s.total_envs)
        seen: dict[str, list[torch.Tensor]] = {k: [] for k in self.obs}
        obs = self.obs
        for t in range(T):
            for k, v in obs.items():
                seen[k].append(v.clone())
            self._act(obs, noise[t], t)  # into the buffer, which the first rollout overwrites
            obs = self.envs.step(self.buffer.actions[t]).obs
        self.obs = obs
        self.envs.set_steps(0)  # error messages number the steps trained on, as global_step
        self._merge({k: torch.cat(v) for k, v in seen.items()})

    def _act(self, obs: DeviceObs, noise: torch.Tensor, t: int) -> None:
        """Actions, log-probs and values of step t into the buffer, in micro-batches of envs."""
        buf, size = self.buffer, self.micro_batch
        for i in range(0, self.envs.num_envs, size):
            rows = slice(i, i + size)
            action, logprob, value = self.policy.act(_rows(obs, rows), noise[rows])
            buf.actions[t, rows] = action
            buf.logprobs[t, rows] = logprob
            buf.values[t, rows] = value

    def _values(self, obs: DeviceObs, rows: int | None = None) -> torch.Tensor:
        """V(obs) (B,), at most `rows` (default: the micro-batch of envs) per forward pass."""
        n = next(iter(obs.values())).shape[0]
        size = rows or self.micro_batch
        parts = [self.policy.value(_rows(obs, slice(i, i + size))) for i in range(0, n, size)]
        return torch.cat(parts)

    def _record(self, t: int, res: DeviceStep, keep_finals: bool, finals: list[Final]) -> None:
        """Step t's rewards, ends and, where an episode was truncated, V(final_obs)."""
        buf = self.buffer
        buf.rewards[t] = res.reward
        buf.terminated[t] = res.terminated.float()
        ends = res.terminated | res.truncated
        buf.ends[t] = ends.float()
        cut = res.truncated & ~res.terminated
        buf.truncated[t] = cut
        self.episode_returns[t] = res.episode_return
        self.episode_lengths[t] = res.episode_length
        if res.ended:  # the host knows whether any episode ended (the env reset them)
            # Every row is valued (no host read of which ones); only truncated rows count.
            values = self._values(res.final_obs)
            buf.final_values[t] = torch.where(cut, values, 0.0)
            if keep_finals:
                finals.append((t, cut, {k: v.clone() for k, v in res.final_obs.items()}))

    def _stats(self, steps: int, logs: dict[str, list[tuple[torch.Tensor, int]]]) -> RolloutStats:
        """The rollout's finished episodes, read from the device once."""
        ends = self.buffer.ends.bool()
        stats = RolloutStats(steps=steps)
        stats.episode_returns = self.episode_returns[ends].tolist()
        stats.episode_lengths = self.episode_lengths[ends].tolist()
        if logs:
            # Each step's log is a mean over the episodes that ended then: weigh it by them.
            names = list(logs)
            means = torch.stack(
                [sum(v * n for v, n in logs[k]) / max(1, sum(n for _, n in logs[k])) for k in names]
            ).tolist()
            stats.episode_logs = [dict(zip(names, means, strict=True))]
        return stats

    # ------------------------------------------------------------------ observation statistics
    def merge_obs_statistics(self) -> None:
        """Merge the last rollout's observations into the normalizers (after the update), once."""
        if self.merged:
            return
        self._merge(self.buffer.flat("obs")["obs"])

    def _merge(self, obs: DeviceObs) -> None:
        self.policy.update_obs_statistics(obs, self.settings.reduce)
        self.merged = True


def _cuda_devices(device: torch.device) -> list[int]:
    """The CUDA devices whose generators `fork_rng` keeps (the training device's)."""
    return [device.index or 0] if device.type == "cuda" else []


@contextmanager
def _numpy_rng_kept() -> Iterator[None]:
    """Python's and numpy's global generators as they were before, whatever runs inside."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


def _rows(obs: DeviceObs, rows: torch.Tensor | slice) -> DeviceObs:
    """The rows `rows` of every key of `obs` (a slice, or an (N,) bool mask)."""
    return {k: v[rows] for k, v in obs.items()}
