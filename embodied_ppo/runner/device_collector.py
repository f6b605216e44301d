"""Rollout collection from an env that lives on the training device (`vecenv.DeviceVecEnv`,
e.g. mjlab), behind the rollout contract (`runner.rollout`): observations, actions and the whole
rollout stay device tensors, written straight into the buffer; the policy acts in torch.
Nothing goes to the host per step; the episodes' statistics and the finiteness check (of the
stored rollout, its bootstrap values and the observation after it) are read once per rollout,
and only the final observations of truncated episodes are valued.

The semantics are the host `collector.Collector`'s (docs/design.md, rules 1 and 2): a truncated
episode is bootstrapped with V(final_obs), a terminated one with 0; the policy is fixed during
a rollout; before the run's first rollout the policy acts for one rollout's length and its
observations become the normalizers' statistics.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.io.checkpoint_state import EnvsSnapshot, TensorObs
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.noise import DeviceNoise, EnvSlice
from embodied_ppo.runner.rollout import Bootstrap, CollectorSettings, RolloutCollector, RolloutStats
from embodied_ppo.vecenv.device_protocol import DeviceObs, DeviceStep, DeviceVecEnv
from embodied_ppo.vecenv.seeding import warm_up_seed

# A truncation's final observations: (step t, (K,) env indices truncated at t, observations).
Final = tuple[int, torch.Tensor, DeviceObs]
# Each log key's running sum of per-episode means times episodes, and the episodes.
Logs = dict[str, list]


class DeviceCollector(RolloutCollector[DeviceVecEnv, DeviceObs]):
    """Fills a RolloutBuffer by stepping a device env with `policy` (feed-forward policies,
    continuing rollouts)."""

    noise: DeviceNoise

    def __init__(
        self,
        envs: DeviceVecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        settings: CollectorSettings,
    ) -> None:
        super().__init__(envs, policy, buffer, reward_scaler, settings)
        self.micro_batch = settings.micro_batch or envs.num_envs
        T, N = buffer.num_steps, envs.num_envs
        # The raw return and length of the episode that ended at each step (where one did).
        self.episode_returns = torch.zeros(T, N, device=self.device)
        self.episode_lengths = torch.zeros(T, N, dtype=torch.int64, device=self.device)

    def _noise_source(self, envs: EnvSlice) -> DeviceNoise:
        return DeviceNoise(self.policy, envs, self.device)

    # ------------------------------------------------------------------ env state
    def start(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's seed) and keep the first observation."""
        self.obs = self.envs.reset(seeds)

    def state(self) -> EnvsSnapshot:
        """The envs mid-episode and the observation acted on next (checkpoint-safe)."""
        obs = None if self.obs is None else {k: v.cpu().clone() for k, v in self.obs.items()}
        return EnvsSnapshot(self.envs.get_state(), obs, None)

    def _start_kept(self, seeds: list[int]) -> None:
        """A device env may seed the global generators when it resets (mjlab does): a restore's
        fresh start keeps them as the checkpoint restored them, since the env draws from them as
        it steps on."""
        with torch.random.fork_rng(devices=_cuda_devices(self.device)), _numpy_rng_kept():
            self.start(seeds)

    def _accept(self, snapshot: EnvsSnapshot) -> str | None:
        """The observation acted on next, onto the device."""
        assert isinstance(snapshot.obs, dict)
        self.obs = {k: v.to(self.device) for k, v in snapshot.obs.items()}
        return None

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
        buf, s = self.buffer, self.settings
        T, N = buf.num_steps, self.envs.num_envs
        if noise_seed is None:  # one seed of torch's global generator, for both draws
            noise_seed = int(torch.randint(2**62, ()).item())
        if self.policy.needs_obs_statistics():
            self._warm_up(warm_up_seed(noise_seed))
        noise = self.noise.draw(T, noise_seed)
        keep_finals = s.keep_bootstrap_obs
        finals: list[Final] = []
        logs: Logs = {}
        finite = torch.ones((), dtype=torch.bool, device=self.device)
        self.merged = False
        buf.final_values.zero_()
        buf.mask.fill_(1.0)
        obs = self.obs
        for t in range(T):
            for k, v in obs.items():
                buf.obs[k][t] = v
            self._act(obs, noise[t], t)
            res = self.envs.step(self._env_actions(obs, buf.actions[t]))
            self._record(t, res, keep_finals, finals)
            for key, value in res.log.items():
                total = logs.setdefault(key, [0.0, 0])
                total[0], total[1] = total[0] + value * res.ended, total[1] + res.ended
            if res.finite is not None:
                finite &= res.finite
            obs = res.obs
        self.obs = obs
        finite &= _finite(buf.rewards, buf.obs, obs, buf.final_values)
        if not bool(finite):  # one host read per rollout
            raise TrainingError(
                "the environment returned a non-finite observation or reward during this rollout"
            )
        bootstrap = None
        if s.keep_bootstrap_obs:
            bootstrap = Bootstrap({k: v.clone() for k, v in obs.items()}, finals)
        self._finish_buffer(self._values(obs), bootstrap, episodic=False)
        return self._stats(T * N, logs)

    def _warm_up(self, seed: int) -> None:
        """Before a run's first rollout, its normalizers empty: the policy acts for one
        rollout's length, nothing of it trained on, and its observations become the statistics
        (as the host collector's Collector._warm_up)."""
        assert self.obs is not None
        T = self.buffer.num_steps
        noise = self.noise.draw(T, seed)
        seen: dict[str, list[torch.Tensor]] = {k: [] for k in self.obs}
        obs = self.obs
        for t in range(T):
            for k, v in obs.items():
                seen[k].append(v.clone())
            self._act(obs, noise[t], t)  # into the buffer, which the first rollout overwrites
            obs = self.envs.step(self._env_actions(obs, self.buffer.actions[t])).obs
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
        buf.truncated[t] = res.truncated & ~res.terminated
        self.episode_returns[t] = res.episode_return
        self.episode_lengths[t] = res.episode_length
        if res.final_ids is not None:  # the host knows whether any episode was truncated
            # The truncated rows alone are valued (a termination bootstraps 0).
            buf.final_values[t].index_copy_(0, res.final_ids, self._values(res.final_obs))
            if keep_finals:
                finals.append((t, res.final_ids, {k: v.clone() for k, v in res.final_obs.items()}))

    def _stats(self, steps: int, logs: Logs) -> RolloutStats:
        """The rollout's finished episodes, read from the device once."""
        ends = self.buffer.ends.bool()
        stats = RolloutStats(steps=steps)
        stats.episode_returns = self.episode_returns[ends].tolist()
        stats.episode_lengths = self.episode_lengths[ends].tolist()
        if logs:
            # Each step's log is a mean over the episodes that ended then: weighed by them.
            names = list(logs)
            means = [logs[k][0] / max(1, logs[k][1]) for k in names]
            tensors = [i for i, v in enumerate(means) if isinstance(v, torch.Tensor)]
            if tensors:  # the device's means, read at once
                read = torch.stack([means[i].float() for i in tensors]).tolist()
                for i, value in zip(tensors, read, strict=True):
                    means[i] = value
            stats.episode_logs = [dict(zip(names, map(float, means), strict=True))]
        return stats

    # ------------------------------------------------------------------ observation statistics
    def _observations(self) -> TensorObs:
        return self.buffer.flat("obs")["obs"]


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


def _finite(
    rewards: torch.Tensor, stored: DeviceObs, last: DeviceObs, bootstraps: torch.Tensor
) -> torch.Tensor:
    """Whether a rollout's rewards, stored observations, the observation after it and its
    bootstrap values (of the truncations' final observations) are all finite (a 0-d bool)."""
    finite = torch.isfinite(rewards).all() & torch.isfinite(bootstraps).all()
    for group in (stored, last):
        for v in group.values():
            finite &= torch.isfinite(v).all()
    return finite


def _rows(obs: DeviceObs, rows: torch.Tensor | slice) -> DeviceObs:
    """The rows `rows` of every key of `obs` (a slice, or an (N,) bool mask)."""
    return {k: v[rows] for k, v in obs.items()}
