"""Value normalization (`algorithm.normalize_value`): the critic learns returns standardized by
their running mean and standard deviation, and its outputs are scaled back to returns wherever
they are used as values (bootstrapping, advantages, logging).

The critic's head outputs a normalized value v; the value is V = mean + std * v, with the
statistics as they were when the rollout was collected. After collection the rollout's values
(each step's, the bootstrap values and every truncation's V(final_obs)) are scaled back once
(`to_values`), so advantages and returns are computed on values in the reward's units. Before
the update the statistics merge the rollout's returns (of every process: docs/design.md, rule
7), and the update trains the head on the returns and old values standardized with the merged
statistics (`targets`): the value loss, value clipping and the Huber delta are in those units.
The statistics are buffers, saved with every checkpoint.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from embodied_ppo.core.types import Reduce
from embodied_ppo.model.normalizer import RunningMeanStd


class ValueNormalizer(nn.Module):
    """The running statistics of the value targets, and the two directions of the scaling."""

    def __init__(self, eps: float = 1e-8) -> None:
        super().__init__()
        self.stats = RunningMeanStd(())
        self.eps = eps

    def _scale(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, std) as `like`'s dtype and device."""
        std = torch.sqrt(self.stats.var + self.eps)
        return self.stats.mean.to(like), std.to(like)

    def normalize(self, x: Tensor) -> Tensor:
        """Values in the reward's units, standardized: (x - mean) / std."""
        mean, std = self._scale(x)
        return (x - mean) / std

    def denormalize(self, x: Tensor) -> Tensor:
        """The critic's normalized outputs scaled back to values: mean + std * x."""
        mean, std = self._scale(x)
        return x * std + mean

    @torch.no_grad()
    def to_values(self, *fields: Tensor) -> None:
        """Scale a rollout's critic outputs (values, next values, final values) back to values,
        in place."""
        for x in fields:
            x.copy_(self.denormalize(x))

    @torch.no_grad()
    def update(self, returns: Tensor, mask: Tensor, reduce: Reduce | None = None) -> None:
        """Merge the returns of the steps that count (`mask` 1) into the statistics."""
        self.stats.update(returns[mask.bool()], reduce)

    @torch.no_grad()
    def targets(self, values: Tensor, returns: Tensor) -> tuple[Tensor, Tensor]:
        """The old values and returns the update trains the head on: both standardized with the
        statistics now (new tensors; the rollout keeps its values and returns)."""
        return self.normalize(values), self.normalize(returns)
