"""The pure checks of a configuration: ranges and combinations of keys that the types alone cannot express (no environment, no torch). Every refusal is a ConfigError of one line naming the key path, what was given and what is allowed."""

from __future__ import annotations

import re

from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.core.system import launched_world_size


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_config(cfg: Config, world: int | None = None) -> Config:
    """Check ranges and combinations that the types alone cannot express (no env needed).

    `world`: the number of processes the config runs in (default: as many as torchrun started
    this one among), which the minibatch checks count envs and minibatches over.
    """
    e, m, a, o, t = cfg.env, cfg.model, cfg.algorithm, cfg.optim, cfg.trainer
    world = launched_world_size() if world is None else world
    _check(e.id is not None and e.id.strip() != "", "env.id: required, e.g. env.id=Humanoid-v5")
    _check(e.num_envs >= 1, f"env.num_envs: got {e.num_envs}, expected an integer >= 1")
    _check(e.threads >= 1, f"env.threads: got {e.threads}, expected an integer >= 1")
    _check(e.processes >= 1, f"env.processes: got {e.processes}, expected an integer >= 1")
    _check(
        e.processes == 1 or e.backend == "sync",
        f"env.processes: got {e.processes} with backend {e.backend!r}; processes apply to the sync "
        "backend (async uses one process per env, envpool one thread per core): add "
        "env.processes=1",
    )
    _check(
        e.processes <= e.num_envs,
        f"env.processes: got {e.processes} for {e.num_envs} envs (env.num_envs), expected at "
        "most one process per env",
    )
    _check(
        e.threads == 1 or e.backend == "sync",
        f"env.threads: got {e.threads} with backend {e.backend!r}; threads apply to the sync backend "
        "(async uses one process per env, envpool one thread per core): add env.threads=1",
    )
    _check(
        e.max_episode_steps is None or e.max_episode_steps >= 1,
        f"env.max_episode_steps: got {e.max_episode_steps}, expected null or an integer >= 1",
    )
    _check(
        not e.random_episode_start or e.backend == "mjlab",
        f"env.random_episode_start: got true with backend {e.backend!r}; it applies to the mjlab "
        "backend, whose envs all start together (a Gymnasium backend's episodes drift apart by "
        "themselves)",
    )
    if e.backend == "mjlab":
        _check_mjlab(cfg)
    for name in ("clip_obs", "clip_reward"):
        value = getattr(e, name)
        _check(
            value is None or value > 0, f"env.{name}: got {value}, expected null or a number > 0"
        )

    _check(len(m.hidden_sizes) >= 1, "model.hidden_sizes: got [], expected at least one layer size")
    for i, h in enumerate(m.hidden_sizes):
        _check(h >= 1, f"model.hidden_sizes[{i}]: got {h}, expected an integer >= 1")
    _check(len(m.cnn_channels) >= 1, "model.cnn_channels: got [], expected at least one layer")
    for i, c in enumerate(m.cnn_channels):
        _check(c >= 1, f"model.cnn_channels[{i}]: got {c}, expected an integer >= 1")
    _check(m.cnn_features >= 1, f"model.cnn_features: got {m.cnn_features}, expected >= 1")
    for name in ("cnn_kernels", "cnn_strides"):
        values = getattr(m, name)
        if values is None:
            continue
        _check(
            len(values) == len(m.cnn_channels),
            f"model.{name}: got {len(values)} entries for {len(m.cnn_channels)} layers "
            f"(model.cnn_channels), expected one per layer or null",
        )
        for i, v in enumerate(values):
            _check(v >= 1, f"model.{name}[{i}]: got {v}, expected an integer >= 1")
    for i, w in enumerate(e.wrappers):
        _check(w.name.strip() != "", f"env.wrappers[{i}].name: required, e.g. FlattenObservation")
    _check(
        LOG_STD_MIN <= m.log_std_init <= LOG_STD_MAX,
        f"model.log_std_init: got {m.log_std_init}, expected a number in "
        f"[{LOG_STD_MIN:g}, {LOG_STD_MAX:g}]",
    )

    _check_estimator(cfg)
    for name in (
        "rollout_micro_batch_size",
        "logprob_forward_micro_batch_size",
        "micro_batch_size",
    ):
        value = getattr(a, name)
        _check(
            value is None or value >= 1,
            f"algorithm.{name}: got {value}, expected null or an integer >= 1",
        )
    _check(a.entropy_bonus >= 0, f"algorithm.entropy_bonus: got {a.entropy_bonus}, expected >= 0")
    _check(
        0 < a.clip_ratio_low < 1,
        f"algorithm.clip_ratio_low: got {a.clip_ratio_low}, expected a number in (0, 1)",
    )
    _check(
        a.clip_ratio_high > 0, f"algorithm.clip_ratio_high: got {a.clip_ratio_high}, expected > 0"
    )
    _check(
        a.clip_ratio_c is None or a.clip_ratio_c > 1,
        f"algorithm.clip_ratio_c: got {a.clip_ratio_c}, expected null (dual clip off) or a number > 1",
    )
    _check(
        a.value_clip is None or a.value_clip > 0,
        f"algorithm.value_clip: got {a.value_clip}, expected null (no value clipping) or a number > 0",
    )
    _check(
        a.huber_delta is None or a.huber_delta > 0,
        f"algorithm.huber_delta: got {a.huber_delta}, expected null (squared error) or a number > 0",
    )
    _check(0 <= a.gamma <= 1, f"algorithm.gamma: got {a.gamma}, expected a number in [0, 1]")
    _check(
        0 <= a.gae_lambda <= 1,
        f"algorithm.gae_lambda: got {a.gae_lambda}, expected a number in [0, 1]",
    )
    _check(
        a.rollout_steps >= 1,
        f"algorithm.rollout_steps: got {a.rollout_steps}, expected an integer >= 1",
    )
    _check(
        a.update_epochs >= 1,
        f"algorithm.update_epochs: got {a.update_epochs}, expected an integer >= 1",
    )
    _check(
        a.value_loss_coef >= 0, f"algorithm.value_loss_coef: got {a.value_loss_coef}, expected >= 0"
    )
    batch = a.rollout_steps * cfg.global_envs(world)
    minibatch = cfg.global_minibatch(world)
    if m.recurrent is None:
        _check(
            1 <= minibatch <= batch and batch % minibatch == 0,
            f"algorithm.minibatch_size: got {a.minibatch_size}{_scale_note(cfg, world)}, "
            f"expected a divisor of algorithm.rollout_steps x env.num_envs = {batch}"
            f"{_envs_note(cfg, world)} (e.g. {_divisors_hint(batch)})",
        )
    _check_recurrent(cfg, world)
    _check(
        a.micro_batch_size is None or a.micro_batch_size <= minibatch,
        f"algorithm.micro_batch_size: got {a.micro_batch_size}, expected null or at most "
        f"algorithm.minibatch_size = {minibatch}{_scale_note(cfg, world)}",
    )

    _check(o.lr > 0, f"optim.lr: got {o.lr}, expected a number > 0")
    _check(o.desired_kl > 0, f"optim.desired_kl: got {o.desired_kl}, expected a number > 0")
    _check(
        0 < o.lr_min <= o.lr_max,
        f"optim.lr_min / optim.lr_max: got {o.lr_min} / {o.lr_max}, expected 0 < lr_min <= lr_max",
    )
    _check(
        o.schedule != "adaptive" or o.lr_min <= o.lr <= o.lr_max,
        f"optim.lr: got {o.lr}, with schedule 'adaptive' expected a value in [lr_min, lr_max] = [{o.lr_min}, {o.lr_max}]",
    )
    _check(o.adam_eps > 0, f"optim.adam_eps: got {o.adam_eps}, expected a number > 0")
    _check(
        o.max_grad_norm is None or o.max_grad_norm > 0,
        f"optim.max_grad_norm: got {o.max_grad_norm}, expected null (no clipping) or a number > 0",
    )

    _check(
        t.total_steps >= 1, f"trainer.total_steps: got {t.total_steps}, expected an integer >= 1"
    )
    _check(0 <= t.seed < 2**63, f"trainer.seed: got {t.seed}, expected an integer in [0, 2^63)")
    _check(
        bool(_DEVICE_RE.match(t.device)),
        f"trainer.device: got {t.device!r}, allowed: auto | cpu | cuda | cuda:N",
    )
    _check(t.dist_timeout > 0, f"trainer.dist_timeout: got {t.dist_timeout}, expected seconds > 0")
    _check(
        t.inference != "host" or m.activation != "gelu",
        "trainer.inference: got 'host', which does not support model.activation 'gelu'; use auto or device",
    )
    _check(
        t.log_interval >= 1, f"trainer.log_interval: got {t.log_interval}, expected an integer >= 1"
    )
    _check(
        t.checkpoint_interval >= 1,
        f"trainer.checkpoint_interval: got {t.checkpoint_interval}, expected an integer >= 1",
    )
    _check(
        t.keep_checkpoints is None or t.keep_checkpoints >= 1,
        f"trainer.keep_checkpoints: got {t.keep_checkpoints}, expected null (keep all) or an "
        "integer >= 1",
    )
    _check(
        t.torch_threads is None or t.torch_threads >= 1,
        f"trainer.torch_threads: got {t.torch_threads}, expected null or an integer >= 1",
    )
    _check(
        t.eval_interval is None or t.eval_interval >= 1,
        f"trainer.eval_interval: got {t.eval_interval}, expected null (no evaluation) or an integer >= 1",
    )
    _check(
        t.eval_episodes >= 1,
        f"trainer.eval_episodes: got {t.eval_episodes}, expected an integer >= 1",
    )
    _check(
        t.video_interval is None or t.video_interval >= 1,
        f"trainer.video_interval: got {t.video_interval}, expected null (no videos) or an integer >= 1",
    )
    _check(
        t.video_interval is None or t.eval_interval is not None,
        f"trainer.video_interval: got {t.video_interval} but trainer.eval_interval is null; "
        "videos are recorded during evaluation, so set trainer.eval_interval too",
    )
    return cfg


def _check_estimator(cfg: Config) -> None:
    """Combinations of estimator, loss type, grouping, aggregation and KL keys."""
    a, e = cfg.algorithm, cfg.env
    _check(a.group_size >= 1, f"algorithm.group_size: got {a.group_size}, expected an integer >= 1")
    if a.adv_type == "gae":
        _check(
            a.group_size == 1,
            f"algorithm.group_size: got {a.group_size} with adv_type 'gae'; group sampling needs "
            "adv_type grpo, rloo or reinforce_plus_plus",
        )
        _check(
            a.loss_type == "actor_critic",
            "algorithm.loss_type: got 'actor' with adv_type 'gae'; GAE needs a critic, use "
            "loss_type actor_critic or a critic-free adv_type (grpo, rloo, reinforce_plus_plus)",
        )
    _check(
        not a.recompute_advantages or a.adv_type == "gae",
        f"algorithm.recompute_advantages: got true with adv_type {a.adv_type!r}, whose "
        "advantages use no critic; use adv_type gae, or recompute_advantages: false",
    )
    if a.adv_type in ("grpo", "rloo"):
        _check(
            a.group_size >= 2,
            f"algorithm.group_size: got {a.group_size} with adv_type {a.adv_type!r}; a group "
            "baseline needs group_size >= 2",
        )
    _check(
        e.num_envs % a.group_size == 0,
        f"env.num_envs: got {e.num_envs}, expected a multiple of algorithm.group_size = {a.group_size}",
    )
    _check(
        a.loss_type != "actor_critic" or a.value_loss_coef > 0,
        "algorithm.value_loss_coef: got 0 with loss_type 'actor_critic', which then trains no "
        "critic; use loss_type actor for a critic-free run",
    )
    if a.loss_agg_func != "token-mean":
        T = a.rollout_steps
        _check(
            a.minibatch_size % T == 0,
            f"algorithm.minibatch_size: got {a.minibatch_size}; with loss_agg_func "
            f"{a.loss_agg_func!r} minibatches are whole env sequences, so it must be a multiple "
            f"of algorithm.rollout_steps = {T}",
        )
        _check(
            a.micro_batch_size is None or a.micro_batch_size % T == 0,
            f"algorithm.micro_batch_size: got {a.micro_batch_size}; with loss_agg_func "
            f"{a.loss_agg_func!r} it must be null or a multiple of algorithm.rollout_steps = {T}",
        )
    _check(
        a.early_stop_kl is None or a.early_stop_kl > 0,
        f"algorithm.early_stop_kl: got {a.early_stop_kl}, expected null (off) or a number > 0",
    )
    _check(a.kl_loss_coef >= 0, f"algorithm.kl_loss_coef: got {a.kl_loss_coef}, expected >= 0")
    k = a.kl_ctrl
    _check(k.kl_coef >= 0, f"algorithm.kl_ctrl.kl_coef: got {k.kl_coef}, expected >= 0")
    _check(k.target_kl > 0, f"algorithm.kl_ctrl.target_kl: got {k.target_kl}, expected > 0")
    _check(k.horizon >= 1, f"algorithm.kl_ctrl.horizon: got {k.horizon}, expected an integer >= 1")
    _check(
        a.reference_checkpoint is None or a.use_kl_loss or a.use_kl_in_reward,
        "algorithm.reference_checkpoint: set, but neither use_kl_loss nor use_kl_in_reward is "
        "true, so no reference policy is used",
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


def _check_recurrent(cfg: Config, world: int) -> None:
    """model.recurrent and algorithm.sequence_length, and what a recurrent update cannot do."""
    m, a = cfg.model, cfg.algorithm
    _check(m.recurrent_size >= 1, f"model.recurrent_size: got {m.recurrent_size}, expected >= 1")
    _check(
        m.recurrent_layers >= 1, f"model.recurrent_layers: got {m.recurrent_layers}, expected >= 1"
    )
    if m.recurrent is None:
        _check(
            a.sequence_length is None,
            f"algorithm.sequence_length: got {a.sequence_length}, but it applies to recurrent "
            "policies only (set model.recurrent: lstm or gru, or use null)",
        )
        return
    T = a.rollout_steps
    L = a.sequence_length or T
    _check(
        1 <= L <= T,
        f"algorithm.sequence_length: got {a.sequence_length}, expected null (whole rollouts) or "
        f"an integer in [1, algorithm.rollout_steps = {T}]",
    )
    # Chunks per rollout (of all processes); the last chunk of each env is padded.
    chunks = -(-T // L) * cfg.global_envs(world)
    minibatch = cfg.global_minibatch(world)
    per = minibatch // L
    fits = [str(L * d) for d in range(1, chunks + 1) if chunks % d == 0][-4:]
    _check(
        minibatch % L == 0 and per >= 1 and chunks % per == 0,
        f"algorithm.minibatch_size: got {a.minibatch_size}{_scale_note(cfg, world)}; a "
        f"recurrent update trains on chunks of {L} steps (algorithm.sequence_length, or "
        f"rollout_steps), {chunks} per rollout{_envs_note(cfg, world)}, so it must be {L} x a "
        f"divisor of {chunks} (e.g. {', '.join(fits)})",
    )
    _check(
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
        _check(
            not given,
            f"algorithm.{key}: got {getattr(a, key)!r}, which a recurrent policy does not "
            f"support ({reason}); use the default, or model.recurrent: null",
        )


def _check_mjlab(cfg: Config) -> None:
    """What the mjlab backend supports: one batched env on the training device, acting in
    torch, stepping continuing rollouts (no wrappers, no critic-free estimators, no recurrence)."""
    e, m, a, t = cfg.env, cfg.model, cfg.algorithm, cfg.trainer
    _check(
        not e.wrappers,
        f"env.wrappers: got {len(e.wrappers)} wrapper(s) with backend 'mjlab'; mjlab tasks are "
        "configured through env.kwargs (fields of the task's env config), not Gymnasium wrappers",
    )
    _check(
        a.adv_type == "gae",
        f"algorithm.adv_type: got {a.adv_type!r} with backend 'mjlab'; mjlab tasks run "
        "continuing rollouts, use gae",
    )
    _check(
        m.recurrent is None,
        f"model.recurrent: got {m.recurrent!r} with backend 'mjlab', which trains feed-forward "
        "policies; use null",
    )
    _check(
        t.inference != "host",
        "trainer.inference: got 'host' with backend 'mjlab', whose observations stay on the "
        "training device; use auto or device",
    )
    _check(
        m.actor_obs_keys is not None,
        "model.actor_obs_keys: required with backend 'mjlab': the observation groups the actor "
        "reads (and a deployed policy takes), e.g. [actor]",
    )


def _divisors_hint(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    mid = [d for d in divs if 32 <= d <= 4096] or divs
    return ", ".join(str(d) for d in mid[-4:])
