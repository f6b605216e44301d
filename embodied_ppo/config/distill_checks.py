"""The pure checks of the `distill:` and `finetune:` blocks: ranges, and what a distillation run
or a fine-tune cannot be combined with. Each refusal is one line naming the key (the teachers
themselves are checked against the env before a run starts: `runner.teachers`)."""

from __future__ import annotations

import dataclasses
import math

from embodied_ppo.config.distill_schema import DistillConfig
from embodied_ppo.config.schema import CRITIC_FREE, Config
from embodied_ppo.core.errors import require
from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN


def check_distill(cfg: Config) -> None:
    """The distill block, then the finetune block."""
    if cfg.distill.teachers:
        _check_distillation(cfg)
    else:
        _check_no_distillation(cfg)
    _check_finetune(cfg)


def _check_distillation(cfg: Config) -> None:
    """A distillation run: its teachers' names, its loss, and, learning by behaviour cloning
    alone (distill.objective bc), the PPO options it has no use for (its update is the same
    machinery with the distillation loss: no rewards, advantages, log-probabilities or
    critic)."""
    d, a, o = cfg.distill, cfg.algorithm, cfg.optim
    for i, path in enumerate(d.teachers):
        require(
            isinstance(path, str) and path.strip() != "",
            f"distill.teachers[{i}]: got {path!r}, expected a run directory or a checkpoint",
        )
    several = len(d.teachers) > 1
    require(
        not several or d.teacher_key is not None,
        f"distill.teacher_key: required with {len(d.teachers)} teachers: the observation key "
        "whose value (0, 1, ...) names each env's teacher",
    )
    require(
        several or d.teacher_key is None,
        f"distill.teacher_key: got {d.teacher_key!r} with one teacher, which labels every "
        "step; use null",
    )
    require(d.huber_delta > 0, f"distill.huber_delta: got {d.huber_delta}, expected > 0")
    require(
        d.teacher_acts_steps >= 0,
        f"distill.teacher_acts_steps: got {d.teacher_acts_steps}, expected an integer >= 0",
    )
    require(
        cfg.model.head != "categorical",
        "model.head: got 'categorical'; distillation learns a Gaussian policy's mean action "
        "(continuous actions)",
    )
    if d.objective == "ppo":
        _check_kickstart(cfg)
        return
    for name in ("coef", "coef_decay_steps"):
        value = getattr(d, name)
        require(
            value == getattr(DistillConfig(), name),
            f"distill.{name}: got {value!r} with distill.objective bc, which has no PPO loss "
            "to weigh it against; use distill.objective ppo, or leave it out",
        )
    switches = {  # on: refused
        "algorithm.recompute_old_logprobs": a.recompute_old_logprobs,
        "algorithm.recompute_advantages": a.recompute_advantages,
        "algorithm.use_kl_loss": a.use_kl_loss,
        "algorithm.use_kl_in_reward": a.use_kl_in_reward,
        "algorithm.normalize_value": a.normalize_value,
        "algorithm.symmetry.augment": a.symmetry.augment,
        "algorithm.rnd.enabled": a.rnd.enabled,
    }
    # key: (what was given, whether it is refused, what to use)
    unused = {key: (on, on, "false") for key, on in switches.items()} | {
        "algorithm.adv_type": (a.adv_type, a.adv_type != "gae", "gae"),
        "algorithm.loss_agg_func": (a.loss_agg_func, a.loss_agg_func != "token-mean", "token-mean"),
        "algorithm.early_stop_kl": (a.early_stop_kl, a.early_stop_kl is not None, "null"),
        "algorithm.symmetry.mirror_loss_coef": (
            a.symmetry.mirror_loss_coef,
            a.symmetry.mirror_loss_coef > 0,
            "0",
        ),
        "optim.schedule": (o.schedule, o.schedule == "adaptive", "constant or linear"),
    }
    for key, (given, refused, allowed) in unused.items():
        require(
            not refused,
            f"{key}: got {given!r} with distill.teachers; a distillation run learns the "
            f"teachers' actions, not from rewards, advantages, values or a KL: use {allowed}",
        )


def _check_kickstart(cfg: Config) -> None:
    """distill.objective ppo: PPO's loss plus the weighted distillation loss, so PPO's options
    stay open; refused is what would label or learn from actions the policy did not take."""
    d = cfg.distill
    require(
        math.isfinite(d.coef) and d.coef >= 0,
        f"distill.coef: got {d.coef}, expected a number >= 0",
    )
    require(
        d.coef_decay_steps >= 0,
        f"distill.coef_decay_steps: got {d.coef_decay_steps}, expected an integer >= 0",
    )
    require(
        d.teacher_acts_steps == 0,
        f"distill.teacher_acts_steps: got {d.teacher_acts_steps} with distill.objective ppo, "
        "whose PPO loss learns from the policy's own actions; use 0",
    )
    require(
        not cfg.algorithm.symmetry.augment,
        "algorithm.symmetry.augment: got true with distill.objective ppo; the teachers label "
        "the collected states, not their mirrors: use false (the mirror loss is allowed)",
    )


def _check_no_distillation(cfg: Config) -> None:
    """Without teachers the distill block's other keys would be read by nothing."""
    default = DistillConfig()
    for f in dataclasses.fields(DistillConfig):
        value = getattr(cfg.distill, f.name)
        require(
            value == getattr(default, f.name),
            f"distill.{f.name}: got {value!r} without distill.teachers; it applies to a "
            "distillation run (name its teachers, or leave it out)",
        )


def _check_finetune(cfg: Config) -> None:
    """finetune.log_std needs a loaded Gaussian head with a learned log-std; the critic
    warm-up needs a critic and PPO."""
    f, m, a = cfg.finetune, cfg.model, cfg.algorithm
    if f.log_std is not None:
        require(
            LOG_STD_MIN <= f.log_std <= LOG_STD_MAX,
            f"finetune.log_std: got {f.log_std}, expected null or a number in "
            f"[{LOG_STD_MIN:g}, {LOG_STD_MAX:g}]",
        )
        require(
            m.init_from is not None,
            "finetune.log_std: needs model.init_from (a fresh policy starts at model.log_std_init)",
        )
        require(
            not m.state_dependent_std,
            "finetune.log_std: got a number with model.state_dependent_std true, whose log-std "
            "is computed from the features; use null",
        )
    require(
        f.critic_warmup_updates >= 0,
        f"finetune.critic_warmup_updates: got {f.critic_warmup_updates}, expected an integer >= 0",
    )
    if f.critic_warmup_updates == 0:
        return
    for given, why in (
        (
            bool(cfg.distill.teachers) and cfg.distill.objective == "bc",
            "a distillation run (distill.objective bc) trains no critic",
        ),
        (a.adv_type in CRITIC_FREE, f"algorithm.adv_type {a.adv_type} has no critic"),
    ):
        require(
            not given,
            f"finetune.critic_warmup_updates: got {f.critic_warmup_updates}, but {why}; use 0",
        )
