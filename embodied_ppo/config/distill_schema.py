"""The `distill:` and `finetune:` blocks of the configuration: teacher-student distillation, and
PPO going on from a distilled (or any loaded) policy. Each key has its default and its one-line
meaning, as in `config.schema` (docs/configuration.md is generated from both; the pipeline is
docs/distillation.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from embodied_ppo.config.keys import key as _key


@dataclass(frozen=True)
class DistillConfig:
    """The `distill:` block: a run that names teachers trains its policy (the student) to output
    their mean actions on the states it visits, instead of PPO or beside it."""

    teachers: list[str] = _key(
        list,
        "run directories or checkpoints of the frozen teachers whose mean actions the policy "
        "learns to output on the states it visits (distillation, instead of PPO); []: PPO",
    )
    teacher_key: str | None = _key(
        None,
        "with several teachers: the Dict observation key, one number per env (0, 1, ...), "
        "naming the teacher (its place in distill.teachers) that labels each step",
    )
    loss: Literal["mse", "huber"] = _key(
        "mse",
        "error of the policy's mean action against the teacher's, averaged over steps and "
        "action dimensions: squared, or huber (quadratic up to distill.huber_delta)",
    )
    huber_delta: float = _key(1.0, "loss huber: where the error turns from quadratic to linear")
    teacher_acts_steps: int = _key(
        0,
        "env steps (of all processes) at the start of the run in which the teacher's mean "
        "action drives the envs instead of the policy's sampled one; 0: the policy acts always",
    )
    objective: Literal["bc", "ppo"] = _key(
        "bc",
        "bc: the policy learns only to output the teachers' mean actions; ppo: PPO on the "
        "task's reward plus distill.coef times that loss (kickstarting: the policy also learns "
        "from the reward, and can pass its teachers)",
    )
    coef: float = _key(
        1.0, "objective ppo: the distillation loss's weight beside PPO's at the run's start"
    )
    coef_decay_steps: int = _key(
        0,
        "objective ppo: env steps (of all processes) over which distill.coef falls linearly "
        "to 0; 0: it stays",
    )


@dataclass(frozen=True)
class FinetuneConfig:
    """The `finetune:` block: PPO going on from a loaded policy (`model.init_from`), such as a
    distilled student."""

    log_std: float | None = _key(
        None,
        "with model.init_from: the Gaussian head's log-std once the weights are loaded (a "
        "smaller exploration noise than the start of a fresh run); null: the loaded one",
    )
    critic_warmup_updates: int = _key(
        0,
        "the run's first N updates train the critic alone, the actor frozen (with a shared "
        "backbone, all but the value head), so that a fresh critic's advantages cannot undo a "
        "loaded policy; Adam starts afresh when the actor joins",
    )
