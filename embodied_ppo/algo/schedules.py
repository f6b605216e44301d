"""Learning-rate schedules: constant, linear decay, KL-adaptive."""

from __future__ import annotations

import torch
from torch import Tensor

from embodied_ppo.config.schema import OptimConfig


def learning_rate(optim: OptimConfig, progress: float, current: float | None = None) -> float:
    """The learning rate at `progress` = global_step / total_steps in [0, 1).

    constant: lr; linear: lr * (1 - progress); adaptive: the current (KL-adapted) rate.
    """
    if optim.schedule == "linear":
        return optim.lr * (1.0 - progress)
    if optim.schedule == "adaptive" and current is not None:
        return current
    return optim.lr


def adapt_learning_rate(lr: Tensor, kl: Tensor, optim: OptimConfig) -> Tensor:
    """KL-adaptive rule: kl > 2 desired -> lr / 1.5; kl < desired / 2 -> lr * 1.5; clamped."""
    lr = torch.where(kl > 2.0 * optim.desired_kl, lr / 1.5, lr)
    lr = torch.where(kl < 0.5 * optim.desired_kl, lr * 1.5, lr)
    return lr.clamp(optim.lr_min, optim.lr_max)
