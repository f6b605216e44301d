"""Reward scaling: rewards divided by the running std of the discounted return, then clipped.

Its statistics are buffers, so they travel with the checkpoint (docs/design.md, rule 2).
"""

from __future__ import annotations

import torch
from torch import nn

from embodied_ppo.algo.advantages import linear_scan
from embodied_ppo.core.types import Reduce
from embodied_ppo.model.normalizer import RunningMeanStd


def discounted_scan(
    rewards: torch.Tensor, keep: torch.Tensor, gamma: float, start: torch.Tensor
) -> torch.Tensor:
    """Running discounted returns G_t = gamma * keep_{t-1} * G_{t-1} + r_t over a (T, N) rollout.

    G_{-1} = `start`; keep_t is 0 where an episode ended at step t (its return restarts).
    """
    coef = torch.empty_like(rewards)
    coef[0] = gamma
    coef[1:] = gamma * keep[:-1]
    return linear_scan(coef, rewards, start)


class RewardScaler(nn.Module):
    """Divides rewards by the running std of the discounted return, then clips.

    The per-env discounted return restarts at every episode end; its statistics are buffers, so
    they travel with the checkpoint. `scale_rollout` handles a whole (T, N) rollout: the returns
    of its T steps are merged into the statistics, then all its rewards are scaled with them.
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
    def reset_returns(self) -> None:
        """Forget the running discounted returns (the episodes they belonged to were cut)."""
        self.returns.zero_()

    @torch.no_grad()
    def scale_rollout(
        self,
        rewards: torch.Tensor,
        ends: torch.Tensor,
        mask: torch.Tensor | None = None,
        reduce: Reduce | None = None,
    ) -> torch.Tensor:
        """Scale raw rewards (T, N) of a rollout whose episodes end where `ends` (T, N) is set.

        Steps where `mask` (T, N) is 0 (after an episodic rollout's episode) do not enter the
        statistics.
        """
        if self.enabled:
            keep = 1.0 - ends.to(torch.float64)  # (T, N): 0 where the episode ended
            returns = discounted_scan(rewards.to(torch.float64), keep, self.gamma, self.returns)
            self.returns.copy_(returns[-1] * keep[-1])
            self.stats.update(returns if mask is None else returns[mask.bool()], reduce)
            rewards = rewards / torch.sqrt(self.stats.var + self.eps).to(rewards.dtype)
        if self.clip is not None:
            rewards = rewards.clamp(-self.clip, self.clip)
        return rewards
