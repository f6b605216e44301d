"""Running statistics: the observation normalizer (a module buffer) and the reward scaler."""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Exact running mean and variance over every row seen, kept as float64 buffers.

    Merging uses the parallel (Chan et al.) update, so feeding the data in any batching gives the
    statistics of the concatenation. `count` starts at 0: no prior is mixed in.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of `x` (B, *shape) into the statistics."""
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(dim=0)
        batch_var = x.var(dim=0, unbiased=False)
        self.merge(
            batch_mean, batch_var, torch.tensor(float(n), dtype=torch.float64, device=x.device)
        )

    @torch.no_grad()
    def merge(
        self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: torch.Tensor
    ) -> None:
        """Merge precomputed (mean, population variance, count) statistics."""
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta.square() * self.count * batch_count / total
        )
        self.mean.add_(delta * batch_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObsNormalizer(RunningMeanStd):
    """Observation normalizer living inside the policy (DESIGN Rule 2).

    `forward` never updates the statistics: the collector calls `update` explicitly during
    collection, so evaluation and exported policies are frozen by construction. When disabled it
    is the identity (still clipping when `clip` is set).
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        enabled: bool = True,
        clip: float | None = 10.0,
        eps: float = 1e-8,
    ) -> None:
        super().__init__(shape)
        self.enabled = enabled
        self.clip = clip
        self.eps = eps

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            mean = self.mean.to(obs.dtype)
            std = torch.sqrt(self.var + self.eps).to(obs.dtype)
            obs = (obs - mean) / std
        if self.clip is not None:
            obs = obs.clamp(-self.clip, self.clip)
        return obs


class RewardScaler(nn.Module):
    """Divides rewards by the running std of the discounted return, then clips.

    The per-env discounted return restarts at every episode end. The statistics are buffers so
    they travel with the checkpoint.
    """

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        enabled: bool = True,
        clip: float | None = 10.0,
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.stats = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))
        self.gamma = gamma
        self.enabled = enabled
        self.clip = clip
        self.eps = eps

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, episode_end: torch.Tensor) -> torch.Tensor:
        """Scale one step of rewards (N,); `episode_end` (N,) bool marks envs whose episode ended."""
        if self.enabled:
            self.returns.mul_(self.gamma).add_(reward.to(torch.float64))
            self.stats.update(self.returns)
            self.returns.masked_fill_(episode_end, 0.0)
            reward = reward / torch.sqrt(self.stats.var + self.eps).to(reward.dtype)
        if self.clip is not None:
            reward = reward.clamp(-self.clip, self.clip)
        return reward
