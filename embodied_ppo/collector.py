"""Rollout collection: env <-> policy, with truncation bootstrap values (DESIGN Rule 1)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from embodied_ppo.buffer import RolloutBuffer
from embodied_ppo.envs import VecEnv
from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.normalizer import RewardScaler


@dataclass
class RolloutStats:
    """Finished episodes (raw returns and lengths) seen during one rollout."""

    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    steps: int = 0  # environment steps taken (N per vector step)


class Collector:
    """Fills a RolloutBuffer by stepping `envs` with `policy`.

    The observation normalizer is updated here and only here, once per step with the batch of
    observations the policy acts on. `micro_batch` bounds how many envs go through one policy
    forward; noise is drawn for all envs at once, so it never changes a sample (Rule 3).
    """

    def __init__(
        self,
        envs: VecEnv,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        reward_scaler: RewardScaler,
        device: torch.device,
        micro_batch: int | None = None,
    ) -> None:
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.reward_scaler, self.device = reward_scaler, device
        self.micro_batch = micro_batch or envs.num_envs
        self.obs: torch.Tensor | None = None  # (N, obs_dim) on device

    def reset(self, seeds: list[int] | None = None) -> None:
        """Reset the envs (default: the run's per-env seeds) and remember the first observation."""
        self.obs = self._to_device(self.envs.reset(seeds))

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def _act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        noise = self.policy.sample_noise(obs.shape[0], self.device)
        if obs.shape[0] <= self.micro_batch:
            return self.policy.act(obs, noise)
        parts = [
            self.policy.act(obs[i : i + self.micro_batch], noise[i : i + self.micro_batch])
            for i in range(0, obs.shape[0], self.micro_batch)
        ]
        return tuple(torch.cat(p) for p in zip(*parts))  # type: ignore[return-value]

    def _value(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            [
                self.policy.value(obs[i : i + self.micro_batch])
                for i in range(0, obs.shape[0], self.micro_batch)
            ]
        )

    @torch.inference_mode()
    def collect(self, episode_seeds: list[int] | None = None) -> RolloutStats:
        """Run up to `buffer.num_steps` vector steps and fill every buffer field but advantages.

        Continuing mode (default): envs carry on across rollouts and every step counts. Episodic
        mode (`episode_seeds` given): every env is reset with its seed, runs one episode, and the
        steps after its end are masked out (`buf.mask`); collection stops once all have ended.
        """
        episodic = episode_seeds is not None
        if episodic:
            self.reset(episode_seeds)
        assert self.obs is not None, "call reset() first"
        buf, stats = self.buffer, RolloutStats()
        buf.truncated.zero_()
        buf.final_values.zero_()
        buf.mask.fill_(1.0)
        done = np.zeros(self.envs.num_envs, dtype=bool)  # episodic: env finished its episode
        for t in range(buf.num_steps):
            obs = self.obs
            if self.policy.obs_normalizer.enabled:
                # Only observations the learner will train on feed the statistics.
                self.policy.obs_normalizer.update(
                    obs[self._to_device(~done)] if done.any() else obs
                )
            action, logprob, value = self._act(obs)
            buf.obs[t] = obs
            buf.actions[t] = action
            buf.logprobs[t] = logprob
            buf.values[t] = value

            res = self.envs.step(action.cpu().numpy())
            ends_np = res.terminated | res.truncated
            ends = self._to_device(ends_np)
            buf.rewards[t] = self.reward_scaler(self._to_device(res.reward), ends)
            buf.terminated[t] = self._to_device(res.terminated)
            buf.ends[t] = ends
            trunc_only = np.flatnonzero(res.truncated & ~res.terminated)
            if trunc_only.size:
                # Bootstrap a time-limit cut with V(final_obs), never V(reset obs).
                idx = torch.from_numpy(trunc_only).to(self.device)
                buf.final_values[t, idx] = self._value(self._to_device(res.final_obs[trunc_only]))
                buf.truncated[t, idx] = True
            for env, ret, length in zip(res.episode_envs, res.episode_returns, res.episode_lengths):
                if not done[env]:
                    stats.episode_returns.append(ret)
                    stats.episode_lengths.append(length)
            self.obs = self._to_device(res.obs)
            stats.steps += self.envs.num_envs
            if episodic:
                buf.mask[t] = self._to_device(~done)
                done |= ends_np
                if done.all():
                    buf.mask[t + 1 :] = 0.0
                    buf.ends[t + 1 :] = 1.0
                    break
        buf.finalize_next_values(self._value(self.obs))
        return stats
