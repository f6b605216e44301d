"""Running statistics: the observation normalizer (a module buffer) and the reward scaler."""

from __future__ import annotations

from collections.abc import Callable

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
    def update(
        self, x: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> None:
        """Merge the rows of `x` (B, *shape) into the statistics.

        `reduce` sums a tensor over the processes of a distributed run, so that every rank merges
        the statistics of all ranks' rows (from the count, sum and sum of squares, in float64).
        """
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        if reduce is not None:
            n = torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device)
            packed = reduce(
                torch.cat([n, x.sum(dim=0).reshape(-1), x.square().sum(dim=0).reshape(-1)])
            )
            count = packed[0]
            if count.item() == 0:
                return
            size = self.mean.numel()
            mean = (packed[1 : 1 + size] / count).reshape(self.mean.shape)
            var = (packed[1 + size :] / count).reshape(self.mean.shape) - mean.square()
            self.merge(mean, var.clamp(min=0.0), count)
            return
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
    """Observation normalizer living inside the policy (docs/design.md, rule 2).

    `forward` never updates the statistics: the trainer merges each rollout's observations with
    `update`, so evaluation and exported policies are frozen by construction. When disabled it is
    the identity (still clipping when `clip` is set). The float32 shift and scale that `forward`
    uses are cached in non-persistent buffers and refreshed whenever the statistics change.
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
        self.register_buffer("shift", torch.zeros(shape), persistent=False)
        self.register_buffer("scale", torch.ones(shape), persistent=False)
        self.register_load_state_dict_post_hook(lambda module, _keys: module.refresh())
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Recompute the cached shift (mean) and scale (1 / std) from the statistics."""
        self.shift.copy_(self.mean.to(self.shift.dtype))
        self.scale.copy_(torch.rsqrt(self.var + self.eps).to(self.scale.dtype))

    @torch.no_grad()
    def merge(
        self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: torch.Tensor
    ) -> None:
        """Merge precomputed statistics, then refresh the cached shift and scale."""
        super().merge(batch_mean, batch_var, batch_count)
        self.refresh()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """`obs` normalized with the statistics as they are (never updated here), then clipped
        where `clip` is set."""
        if self.enabled:
            obs = (obs - self.shift) * self.scale
        if self.clip is not None:
            obs = obs.clamp(-self.clip, self.clip)
        return obs
