"""The checks of the algorithm block: ranges, the estimator's combinations, and the minibatch
and micro-batch sizes over the batch of all processes (recurrent chunks included). Part of
`checks.check_config`; every refusal is one line naming the key path, what was given and what
is allowed."""

from __future__ import annotations

import math

from embodied_ppo.config.auxiliary import check_auxiliary
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import require


def check_algorithm(cfg: Config) -> None:
    """The algorithm block's ranges: micro-batch sizes, coefficients, clips, discounts."""
    a = cfg.algorithm
    for name in (
        "rollout_micro_batch_size",
        "logprob_forward_micro_batch_size",
        "micro_batch_size",
    ):
        value = getattr(a, name)
        require(
            value is None or value >= 1,
            f"algorithm.{name}: got {value}, expected null or an integer >= 1",
        )
    require(a.entropy_bonus >= 0, f"algorithm.entropy_bonus: got {a.entropy_bonus}, expected >= 0")
    require(
        0 < a.clip_ratio_low < 1,
        f"algorithm.clip_ratio_low: got {a.clip_ratio_low}, expected a number in (0, 1)",
    )
    require(
        a.clip_ratio_high > 0, f"algorithm.clip_ratio_high: got {a.clip_ratio_high}, expected > 0"
    )
    require(
        a.clip_ratio_c is None or a.clip_ratio_c > 1,
        f"algorithm.clip_ratio_c: got {a.clip_ratio_c}, expected null (dual clip off) or a number > 1",
    )
    require(
        a.value_clip is None or a.value_clip > 0,
        f"algorithm.value_clip: got {a.value_clip}, expected null (no value clipping) or a number > 0",
    )
    require(
        a.huber_delta is None or a.huber_delta > 0,
        f"algorithm.huber_delta: got {a.huber_delta}, expected null (squared error) or a number > 0",
    )
    require(0 <= a.gamma <= 1, f"algorithm.gamma: got {a.gamma}, expected a number in [0, 1]")
    require(
        0 <= a.gae_lambda <= 1,
        f"algorithm.gae_lambda: got {a.gae_lambda}, expected a number in [0, 1]",
    )
    require(
        a.rollout_steps >= 1,
        f"algorithm.rollout_steps: got {a.rollout_steps}, expected an integer >= 1",
    )
    require(
        a.update_epochs >= 1,
        f"algorithm.update_epochs: got {a.update_epochs}, expected an integer >= 1",
    )
    require(
        a.value_loss_coef >= 0, f"algorithm.value_loss_coef: got {a.value_loss_coef}, expected >= 0"
    )
    require(
        not a.normalize_value or a.loss_type == "actor_critic",
        "algorithm.normalize_value: got true with loss_type 'actor', which trains no critic; "
        "use loss_type actor_critic, or normalize_value: false",
    )
    check_auxiliary(a.symmetry, a.rnd, a.rollout_steps)


def check_estimator(cfg: Config) -> None:
    """Combinations of estimator, loss type, grouping, aggregation and KL keys."""
    a, e = cfg.algorithm, cfg.env
    require(
        a.group_size >= 1, f"algorithm.group_size: got {a.group_size}, expected an integer >= 1"
    )
    if a.adv_type == "gae":
        require(
            a.group_size == 1,
            f"algorithm.group_size: got {a.group_size} with adv_type 'gae'; group sampling needs "
            "adv_type grpo, rloo or reinforce_plus_plus",
        )
        require(
            a.loss_type == "actor_critic",
            "algorithm.loss_type: got 'actor' with adv_type 'gae'; GAE needs a critic, use "
            "loss_type actor_critic or a critic-free adv_type (grpo, rloo, reinforce_plus_plus)",
        )
    require(
        not a.recompute_advantages or a.adv_type == "gae",
        f"algorithm.recompute_advantages: got true with adv_type {a.adv_type!r}, whose "
        "advantages use no critic; use adv_type gae, or recompute_advantages: false",
    )
    if a.adv_type in ("grpo", "rloo"):
        require(
            a.group_size >= 2,
            f"algorithm.group_size: got {a.group_size} with adv_type {a.adv_type!r}; a group "
            "baseline needs group_size >= 2",
        )
    require(
        e.num_envs % a.group_size == 0,
        f"env.num_envs: got {e.num_envs}, expected a multiple of algorithm.group_size = {a.group_size}",
    )
    require(
        a.loss_type != "actor_critic" or a.value_loss_coef > 0,
        "algorithm.value_loss_coef: got 0 with loss_type 'actor_critic', which then trains no "
        "critic; use loss_type actor for a critic-free run",
    )
    if a.loss_agg_func != "token-mean":
        T = a.rollout_steps
        require(
            a.minibatch_size % T == 0,
            f"algorithm.minibatch_size: got {a.minibatch_size}; with loss_agg_func "
            f"{a.loss_agg_func!r} minibatches are whole env sequences, so it must be a multiple "
            f"of algorithm.rollout_steps = {T}",
        )
        require(
            a.micro_batch_size is None or a.micro_batch_size % T == 0,
            f"algorithm.micro_batch_size: got {a.micro_batch_size}; with loss_agg_func "
            f"{a.loss_agg_func!r} it must be null or a multiple of algorithm.rollout_steps = {T}",
        )
    require(
        a.early_stop_kl is None or a.early_stop_kl > 0,
        f"algorithm.early_stop_kl: got {a.early_stop_kl}, expected null (off) or a number > 0",
    )
    require(a.kl_loss_coef >= 0, f"algorithm.kl_loss_coef: got {a.kl_loss_coef}, expected >= 0")
    k = a.kl_ctrl
    require(k.kl_coef >= 0, f"algorithm.kl_ctrl.kl_coef: got {k.kl_coef}, expected >= 0")
    require(k.target_kl > 0, f"algorithm.kl_ctrl.target_kl: got {k.target_kl}, expected > 0")
    require(k.horizon >= 1, f"algorithm.kl_ctrl.horizon: got {k.horizon}, expected an integer >= 1")
    require(
        a.reference_checkpoint is None or a.use_kl_loss or a.use_kl_in_reward,
        "algorithm.reference_checkpoint: set, but neither use_kl_loss nor use_kl_in_reward is "
        "true, so no reference policy is used",
    )


def check_batches(cfg: Config, world: int) -> None:
    """The minibatch and micro-batch sizes against the batch of all `world` processes."""
    a = cfg.algorithm
    batch = a.rollout_steps * cfg.global_envs(world)
    minibatch = cfg.global_minibatch(world)
    if cfg.model.recurrent is None:
        require(
            1 <= minibatch <= batch and batch % minibatch == 0,
            f"algorithm.minibatch_size: got {a.minibatch_size}{_scale_note(cfg, world)}, "
            f"expected a divisor of algorithm.rollout_steps x env.num_envs = {batch}"
            f"{_envs_note(cfg, world)} (e.g. {_divisors_hint(batch)})",
        )
    _check_recurrent(cfg, world)
    require(
        a.micro_batch_size is None or a.micro_batch_size <= minibatch,
        f"algorithm.micro_batch_size: got {a.micro_batch_size}, expected null or at most "
        f"algorithm.minibatch_size = {minibatch}{_scale_note(cfg, world)}",
    )


def _check_recurrent(cfg: Config, world: int) -> None:
    """model.recurrent and algorithm.sequence_length, and what a recurrent update cannot do."""
    m, a = cfg.model, cfg.algorithm
    require(m.recurrent_size >= 1, f"model.recurrent_size: got {m.recurrent_size}, expected >= 1")
    require(
        m.recurrent_layers >= 1, f"model.recurrent_layers: got {m.recurrent_layers}, expected >= 1"
    )
    if m.recurrent is None:
        require(
            a.sequence_length is None,
            f"algorithm.sequence_length: got {a.sequence_length}, but it applies to recurrent "
            "policies only (set model.recurrent: lstm or gru, or use null)",
        )
        return
    T = a.rollout_steps
    L = a.sequence_length or T
    require(
        1 <= L <= T,
        f"algorithm.sequence_length: got {a.sequence_length}, expected null (whole rollouts) or "
        f"an integer in [1, algorithm.rollout_steps = {T}]",
    )
    # Chunks per rollout (of all processes); the last chunk of each env is padded.
    chunks = -(-T // L) * cfg.global_envs(world)
    minibatch = cfg.global_minibatch(world)
    per = minibatch // L
    fits = [str(L * d) for d in range(1, chunks + 1) if chunks % d == 0][-4:]
    require(
        minibatch % L == 0 and per >= 1 and chunks % per == 0,
        f"algorithm.minibatch_size: got {a.minibatch_size}{_scale_note(cfg, world)}; a "
        f"recurrent update trains on chunks of {L} steps (algorithm.sequence_length, or "
        f"rollout_steps), {chunks} per rollout{_envs_note(cfg, world)}, so it must be {L} x a "
        f"divisor of {chunks} (e.g. {', '.join(fits)})",
    )
    require(
        a.micro_batch_size is None or a.micro_batch_size % L == 0,
        f"algorithm.micro_batch_size: got {a.micro_batch_size}; a recurrent update splits "
        f"minibatches into whole chunks, so it must be null or a multiple of {L}",
    )
    why = "the reference policy would need recurrent states of its own"
    refused = {
        "loss_agg_func": (a.loss_agg_func != "token-mean", "chunks are not whole sequences"),
        "recompute_old_logprobs": (a.recompute_old_logprobs, "the stored log-probs are exact"),
        "recompute_advantages": (
            a.recompute_advantages,
            "the values would need the recurrent states the critic reaches under its new weights",
        ),
        "use_kl_loss": (a.use_kl_loss, why),
        "use_kl_in_reward": (a.use_kl_in_reward, why),
    }
    for key, (given, reason) in refused.items():
        require(
            not given,
            f"algorithm.{key}: got {getattr(a, key)!r}, which a recurrent policy does not "
            f"support ({reason}); use the default, or model.recurrent: null",
        )


def _scale_note(cfg: Config, world: int) -> str:
    """How a per-process minibatch size scales with the processes (nothing otherwise)."""
    if world == 1 or cfg.algorithm.minibatch_scope == "global":
        return ""
    return f" per process, {cfg.global_minibatch(world)} for the {world} processes"


def _envs_note(cfg: Config, world: int) -> str:
    """Which envs a run of several processes counts (nothing in one process)."""
    if world == 1:
        return ""
    return f" of all {world} processes' {cfg.global_envs(world)} envs"


def _divisors_hint(n: int) -> str:
    """Up to four divisors of `n` in a usual minibatch range (32 to 4096), else its largest.

    Divisors come in pairs (d, n // d) with d <= sqrt(n): O(sqrt n), so a batch of millions of
    envs (mjlab's) costs microseconds; the message is built on every check, not only on failure.
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divs = sorted(set(small) | {n // d for d in small})
    mid = [d for d in divs if 32 <= d <= 4096] or divs
    return ", ".join(str(d) for d in mid[-4:])
