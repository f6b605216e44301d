"""Learning-rate schedules: constant, linear decay, KL-adaptive; and what a linear schedule
does from a resume that changes the run's budget (`optim.schedule_extension`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from embodied_ppo.config.schema import OptimConfig


@dataclass(frozen=True)
class Extension:
    """A linear schedule from the resume that changed trainer.total_steps on: from `step`,
    `lr` (the rate in effect then), decaying linearly to 0 at step `end`; held at `lr` when
    `end` is None."""

    step: int
    lr: float
    end: int | None

    def rate(self, step: int) -> float:
        """The learning rate at `step` (>= self.step)."""
        if self.end is None:
            return self.lr
        return self.lr * (self.end - step) / (self.end - self.step)

    def to_dict(self) -> dict[str, int | float | None]:
        """As a checkpoint holds it."""
        return {"step": self.step, "lr": self.lr, "end": self.end}

    @classmethod
    def from_dict(cls, data: object) -> Extension | None:
        """From `to_dict()`; None for None (a run whose budget never changed)."""
        if not isinstance(data, dict):
            return None
        end = data.get("end")
        return cls(int(data["step"]), float(data["lr"]), None if end is None else int(end))


def learning_rate(optim: OptimConfig, progress: float, current: float | None = None) -> float:
    """The learning rate at `progress` = global_step / total_steps in [0, 1).

    constant: lr; linear: lr * (1 - progress); adaptive: the current (KL-adapted) rate.
    """
    if optim.schedule == "linear":
        return optim.lr * (1.0 - progress)
    if optim.schedule == "adaptive" and current is not None:
        return current
    return optim.lr


def run_learning_rate(
    optim: OptimConfig,
    step: int,
    total: int,
    current: float | None,
    extension: Extension | None,
) -> float:
    """The learning rate at global step `step` of a run of `total` steps: `learning_rate`,
    or a linear schedule's `extension` from the resume that changed the total on."""
    if optim.schedule == "linear" and extension is not None:
        return extension.rate(step)
    return learning_rate(optim, step / total, current)


def extend_schedule(
    optim: OptimConfig, step: int, lr_now: float, total: int, extension: Extension | None
) -> Extension | None:
    """What a linear schedule does from a resume at `step` that sets trainer.total_steps to
    `total` (`lr_now`: the rate of the last update; `extension`: the run's earlier one).

    continue: from `lr_now` down to 0 at `total`; rescale: None, the schedule of a run
    planned for `total` (lr * (1 - step / total): a longer run's rate rises at the resume
    point); keep: `lr_now` from here on. Other schedules do not depend on the total.
    """
    if optim.schedule != "linear" or optim.schedule_extension == "rescale":
        return None
    if optim.schedule_extension == "keep":
        return Extension(step, lr_now, None)
    return Extension(step, lr_now, total)


def kl_target(optim: OptimConfig, step: int, total: int) -> float:
    """The approx_kl the adaptive schedule aims at in the update after global step `step` of a
    run of `total` steps: desired_kl, or from it linearly to desired_kl_final at `total`."""
    if optim.desired_kl_final is None:
        return optim.desired_kl
    progress = min(max(step / total, 0.0), 1.0)
    return optim.desired_kl + (optim.desired_kl_final - optim.desired_kl) * progress


def adapt_learning_rate(lr: Tensor, kl: Tensor, target: Tensor, optim: OptimConfig) -> Tensor:
    """KL-adaptive rule: kl > 2 target -> lr / 1.5; kl < target / 2 -> lr * 1.5; clamped to
    [lr_min, lr_max]. `target` (a 0-d tensor: `kl_target`) is float32, as the comparison with a
    Python float was: doubling and halving are exact, so the rule decides alike."""
    lr = torch.where(kl > 2.0 * target, lr / 1.5, lr)
    lr = torch.where(kl < 0.5 * target, lr * 1.5, lr)
    return lr.clamp(optim.lr_min, optim.lr_max)
