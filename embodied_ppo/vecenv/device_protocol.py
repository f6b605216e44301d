"""What a vector env that lives on the training device gives the collector: torch tensors in
and out, no copy to the host per step (the mjlab backend is one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from embodied_ppo.vecenv.protocol import BatchedEnvs

# An observation batch on the device: one tensor per key of a Dict observation (N, D).
DeviceObs = dict[str, torch.Tensor]


@dataclass
class DeviceStep:
    """One vector step, as tensors of leading size N on the env's device."""

    obs: DeviceObs  # already reset where an episode ended
    reward: torch.Tensor  # (N,) float32, raw
    terminated: torch.Tensor  # (N,) bool
    truncated: torch.Tensor  # (N,) bool
    # The final observations of the episodes truncated (and not terminated) at this step, the
    # only ones a value bootstraps from (docs/design.md, rule 1): (K, ...) rows, the envs
    # `final_ids` (K,) int64 names; empty and None where no episode was truncated (known on the
    # host, so that nothing is valued then).
    final_obs: DeviceObs
    # the raw return and length of the episode that ended at this step (valid where it ended)
    episode_return: torch.Tensor  # (N,) float32
    episode_length: torch.Tensor  # (N,) int64
    final_ids: torch.Tensor | None = None
    ended: int = 0  # how many episodes ended at this step (known on the host)
    # the env's own scalars of the episodes that ended, each the mean over them (host numbers,
    # or 0-d tensors on the device)
    log: dict[str, float | torch.Tensor] = field(default_factory=dict)
    # False where an observation or reward of this step is not finite (a 0-d bool tensor, read
    # once per rollout); None: the collector checks the rollout it stored instead
    finite: torch.Tensor | None = None


class DeviceVecEnv(BatchedEnvs, Protocol):
    """A batched env on `device` with the semantics of VecEnv (same-step autoreset, final
    observations, episode statistics, state capture) in tensors."""

    device: torch.device

    @property
    def on_device(self) -> Literal[True]:
        """Always True: tensors on the training device in and out."""
        ...

    def reset(self, seeds: list[int] | None = None) -> DeviceObs:
        """Reset every env (default: the run's seed); returns observations (N, ...)."""
        ...

    def step(self, action: torch.Tensor) -> DeviceStep:
        """Step with `action` (N, A) on the device."""
        ...
