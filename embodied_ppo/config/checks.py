"""The pure checks of a configuration: ranges and combinations of keys that the types alone cannot express (no environment, no torch). Every refusal is a ConfigError of one line naming the key path, what was given and what is allowed."""

from __future__ import annotations

import re

from embodied_ppo.config.algorithm_checks import check_algorithm, check_batches, check_estimator
from embodied_ppo.config.distill_checks import check_distill
from embodied_ppo.config.intervals import check_intervals
from embodied_ppo.config.schema import Config, ModelConfig
from embodied_ppo.core.errors import require
from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.core.system import launched_world_size

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_config(cfg: Config, world: int | None = None) -> Config:
    """Check ranges and combinations that the types alone cannot express (no env needed).

    `world`: the number of processes the config runs in (default: as many as torchrun started
    this one among), which the minibatch checks count envs and minibatches over. The checks go
    block by block, in this order; the first refusal stops them.
    """
    world = launched_world_size() if world is None else world
    _check_env(cfg)
    _check_model(cfg)
    check_estimator(cfg)
    check_algorithm(cfg)
    check_batches(cfg, world)
    _check_optim(cfg)
    _check_trainer(cfg)
    check_distill(cfg)
    return cfg


def _check_env(cfg: Config) -> None:
    """The env block: counts, the backends' own keys, clipping, wrappers."""
    e = cfg.env
    require(e.id is not None and e.id.strip() != "", "env.id: required, e.g. env.id=Humanoid-v5")
    require(e.num_envs >= 1, f"env.num_envs: got {e.num_envs}, expected an integer >= 1")
    require(
        e.threads is None or e.threads >= 1,
        f"env.threads: got {e.threads}, expected null or an integer >= 1",
    )
    require(e.processes >= 1, f"env.processes: got {e.processes}, expected an integer >= 1")
    require(
        e.processes == 1 or e.backend == "sync",
        f"env.processes: got {e.processes} with backend {e.backend!r}; processes apply to the sync "
        "backend (async uses one process per env, envpool one thread per core): add "
        "env.processes=1",
    )
    require(
        e.processes <= e.num_envs,
        f"env.processes: got {e.processes} for {e.num_envs} envs (env.num_envs), expected at "
        "most one process per env",
    )
    require(
        e.threads in (1, None) or e.backend == "sync",
        f"env.threads: got {e.threads} with backend {e.backend!r}; threads apply to the sync backend "
        "(async uses one process per env, envpool one thread per core): add env.threads=1",
    )
    require(
        e.max_episode_steps is None or e.max_episode_steps >= 1,
        f"env.max_episode_steps: got {e.max_episode_steps}, expected null or an integer >= 1",
    )
    require(
        not e.random_episode_start or e.backend == "mjlab",
        f"env.random_episode_start: got true with backend {e.backend!r}; it applies to the mjlab "
        "backend, whose envs all start together (a Gymnasium backend's episodes drift apart by "
        "themselves)",
    )
    if e.backend == "mjlab":
        _check_mjlab(cfg)
    for name in ("clip_obs", "clip_reward"):
        value = getattr(e, name)
        require(
            value is None or value > 0, f"env.{name}: got {value}, expected null or a number > 0"
        )
    for i, w in enumerate(e.wrappers):
        require(w.name.strip() != "", f"env.wrappers[{i}].name: required, e.g. FlattenObservation")


def _check_mjlab(cfg: Config) -> None:
    """What the mjlab backend supports: one batched env on the training device, acting in
    torch, stepping continuing rollouts (no wrappers, no critic-free estimators, no recurrence)."""
    e, m, a, t = cfg.env, cfg.model, cfg.algorithm, cfg.trainer
    require(
        not e.wrappers,
        f"env.wrappers: got {len(e.wrappers)} wrapper(s) with backend 'mjlab'; mjlab tasks are "
        "configured through env.kwargs (fields of the task's env config), not Gymnasium wrappers",
    )
    require(
        a.adv_type == "gae",
        f"algorithm.adv_type: got {a.adv_type!r} with backend 'mjlab'; mjlab tasks run "
        "continuing rollouts, use gae",
    )
    require(
        m.recurrent is None,
        f"model.recurrent: got {m.recurrent!r} with backend 'mjlab', which trains feed-forward "
        "policies; use null",
    )
    require(
        t.inference != "host",
        "trainer.inference: got 'host' with backend 'mjlab', whose observations stay on the "
        "training device; use auto or device",
    )
    require(
        m.actor_obs_keys is not None,
        "model.actor_obs_keys: required with backend 'mjlab': the observation groups the actor "
        "reads (and a deployed policy takes), e.g. [actor]",
    )


def _check_model(cfg: Config) -> None:
    """The model block's sizes and the initial log-std (recurrence: `algorithm_checks`)."""
    m = cfg.model
    require(
        len(m.hidden_sizes) >= 1, "model.hidden_sizes: got [], expected at least one layer size"
    )
    for i, h in enumerate(m.hidden_sizes):
        require(h >= 1, f"model.hidden_sizes[{i}]: got {h}, expected an integer >= 1")
    require(len(m.cnn_channels) >= 1, "model.cnn_channels: got [], expected at least one layer")
    for i, c in enumerate(m.cnn_channels):
        require(c >= 1, f"model.cnn_channels[{i}]: got {c}, expected an integer >= 1")
    require(m.cnn_features >= 1, f"model.cnn_features: got {m.cnn_features}, expected >= 1")
    for name in ("cnn_kernels", "cnn_strides"):
        values = getattr(m, name)
        if values is None:
            continue
        require(
            len(values) == len(m.cnn_channels),
            f"model.{name}: got {len(values)} entries for {len(m.cnn_channels)} layers "
            f"(model.cnn_channels), expected one per layer or null",
        )
        for i, v in enumerate(values):
            require(v >= 1, f"model.{name}[{i}]: got {v}, expected an integer >= 1")
    _check_actor_group(cfg)
    require(
        LOG_STD_MIN <= m.log_std_init <= LOG_STD_MAX,
        f"model.log_std_init: got {m.log_std_init}, expected a number in "
        f"[{LOG_STD_MIN:g}, {LOG_STD_MAX:g}]",
    )
    _check_history(cfg)


def _check_actor_group(cfg: Config) -> None:
    """model.actor_group_*: some distinct keys, positive sizes (the keys' kinds: preflight)."""
    m = cfg.model
    for i, h in enumerate(m.actor_group_hidden_sizes):
        require(h >= 1, f"model.actor_group_hidden_sizes[{i}]: got {h}, expected an integer >= 1")
    require(
        m.actor_group_features >= 1,
        f"model.actor_group_features: got {m.actor_group_features}, expected an integer >= 1",
    )
    keys = m.actor_group_keys
    if keys is None:
        require(
            not m.actor_group_zero_init,
            "model.actor_group_zero_init: got true without model.actor_group_keys, whose MLP it "
            "initializes; name the keys or leave it false",
        )
        return
    require(len(keys) >= 1, "model.actor_group_keys: got [], expected null (none) or some keys")
    twice = sorted({k for k in keys if keys.count(k) > 1})
    require(not twice, f"model.actor_group_keys: {', '.join(map(str, twice))} named twice")


def _check_history(cfg: Config) -> None:
    """model.recurrent: history reads history_length and no recurrent size or layers."""
    m, default = cfg.model, ModelConfig()
    if m.recurrent != "history":
        return
    require(
        m.history_length >= 2,
        f"model.history_length: got {m.history_length}, expected an integer >= 2 (1 is no "
        "history: use model.recurrent: null)",
    )
    for name in ("recurrent_size", "recurrent_layers"):
        require(
            getattr(m, name) == getattr(default, name),
            f"model.{name}: got {getattr(m, name)} with model.recurrent history, which has no "
            f"units or layers; leave it at {getattr(default, name)} (model.history_length sets "
            "how many steps it reads)",
        )


def _check_optim(cfg: Config) -> None:
    """The optim block: learning rates, the adaptive schedule's range, Adam, clipping."""
    o = cfg.optim
    require(o.lr > 0, f"optim.lr: got {o.lr}, expected a number > 0")
    require(o.desired_kl > 0, f"optim.desired_kl: got {o.desired_kl}, expected a number > 0")
    if o.desired_kl_final is not None:
        require(
            o.desired_kl_final > 0,
            f"optim.desired_kl_final: got {o.desired_kl_final}, expected null or a number > 0",
        )
        require(
            o.schedule == "adaptive",
            f"optim.desired_kl_final: only the adaptive schedule aims at a KL; optim.schedule is "
            f"{o.schedule!r}",
        )
    require(
        0 < o.lr_min <= o.lr_max,
        f"optim.lr_min / optim.lr_max: got {o.lr_min} / {o.lr_max}, expected 0 < lr_min <= lr_max",
    )
    require(
        o.schedule != "adaptive" or o.lr_min <= o.lr <= o.lr_max,
        f"optim.lr: got {o.lr}, with schedule 'adaptive' expected a value in [lr_min, lr_max] = [{o.lr_min}, {o.lr_max}]",
    )
    require(o.adam_eps > 0, f"optim.adam_eps: got {o.adam_eps}, expected a number > 0")
    require(
        o.max_grad_norm is None or o.max_grad_norm > 0,
        f"optim.max_grad_norm: got {o.max_grad_norm}, expected null (no clipping) or a number > 0",
    )


def _check_trainer(cfg: Config) -> None:
    """The trainer block: length, seed, device, distribution, threads, cadences."""
    t = cfg.trainer
    require(
        t.total_steps >= 1, f"trainer.total_steps: got {t.total_steps}, expected an integer >= 1"
    )
    require(0 <= t.seed < 2**63, f"trainer.seed: got {t.seed}, expected an integer in [0, 2^63)")
    require(
        bool(_DEVICE_RE.match(t.device)),
        f"trainer.device: got {t.device!r}, allowed: auto | cpu | cuda | cuda:N",
    )
    require(t.dist_timeout > 0, f"trainer.dist_timeout: got {t.dist_timeout}, expected seconds > 0")
    require(
        t.inference != "host" or cfg.model.activation != "gelu",
        "trainer.inference: got 'host', which does not support model.activation 'gelu'; use auto or device",
    )
    _check_cadences(cfg)


def _check_cadences(cfg: Config) -> None:
    """How often the trainer logs, checkpoints, evaluates and records, and what it keeps."""
    t = cfg.trainer
    check_intervals(t)
    require(
        t.keep_checkpoints is None or t.keep_checkpoints >= 1,
        f"trainer.keep_checkpoints: got {t.keep_checkpoints}, expected null (keep all) or an "
        "integer >= 1",
    )
    require(
        t.torch_threads is None or t.torch_threads >= 1,
        f"trainer.torch_threads: got {t.torch_threads}, expected null or an integer >= 1",
    )
    require(
        t.eval_episodes >= 1,
        f"trainer.eval_episodes: got {t.eval_episodes}, expected an integer >= 1",
    )
