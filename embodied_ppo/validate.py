"""Every check of a configuration, in one place, and what each path refuses.

- `check_config`: ranges and combinations of the keys themselves (no environment needed); runs
  whenever a Config is built (`config.from_dict`).
- `check_env`: what needs the environment: the id, env.kwargs, the observation and action spaces,
  the policy head, the episodic time limit, and each backend's own refusals.
- `resolve_device`, `inference_path`: what the machine and the policy allow.
- `check_resume_overrides`: which keys a resumed run may change.

Every refusal is a ConfigError with one line naming the key path, what was given and what is
allowed (DESIGN Rule 4).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from embodied_ppo.config import CRITIC_FREE, Config, EnvConfig, parse_override
from embodied_ppo.errors import ConfigError
from embodied_ppo.limits import LOG_STD_MAX, LOG_STD_MIN

# Checking a config must stay cheap (plotting reads configs): gymnasium and torch are imported
# by the checks that need them.
if TYPE_CHECKING:
    import torch

    from embodied_ppo.vecenv.base import SpaceInfo, UnsupportedSpace

# Keys that may change when a run resumes: they change when or how it runs, not what it learns.
RESUMABLE_KEYS = frozenset(
    {
        "trainer.total_steps",
        "trainer.log_interval",
        "trainer.checkpoint_interval",
        "trainer.keep_checkpoints",
        "trainer.wandb",
        "trainer.device",
        "trainer.torch_threads",
        "trainer.compile",
        "env.threads",
        "env.processes",
        "trainer.eval_interval",
        "trainer.eval_episodes",
        "trainer.video_interval",
    }
)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_config(cfg: Config) -> Config:
    """Check ranges and combinations that the types alone cannot express (no env needed)."""
    e, m, a, o, t = cfg.env, cfg.model, cfg.algorithm, cfg.optim, cfg.trainer
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
    batch = cfg.batch_size
    if m.recurrent is None:
        _check(
            1 <= a.minibatch_size <= batch and batch % a.minibatch_size == 0,
            f"algorithm.minibatch_size: got {a.minibatch_size}, expected a divisor of "
            f"algorithm.rollout_steps x env.num_envs = {batch} (e.g. {_divisors_hint(batch)})",
        )
    _check_recurrent(cfg)
    _check(
        a.micro_batch_size is None or a.micro_batch_size <= a.minibatch_size,
        f"algorithm.micro_batch_size: got {a.micro_batch_size}, expected null or at most "
        f"algorithm.minibatch_size = {a.minibatch_size}",
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


def _check_recurrent(cfg: Config) -> None:
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
    chunks = -(-T // L) * cfg.env.num_envs  # per rollout; the last chunk of each env is padded
    per = a.minibatch_size // L
    fits = [str(L * d) for d in range(1, chunks + 1) if chunks % d == 0][-4:]
    _check(
        a.minibatch_size % L == 0 and per >= 1 and chunks % per == 0,
        f"algorithm.minibatch_size: got {a.minibatch_size}; a recurrent update trains on chunks "
        f"of {L} steps (algorithm.sequence_length, or rollout_steps), {chunks} per rollout, so "
        f"it must be {L} x a divisor of {chunks} (e.g. {', '.join(fits)})",
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


def _divisors_hint(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    mid = [d for d in divs if 32 <= d <= 4096] or divs
    return ", ".join(str(d) for d in mid[-4:])


# ------------------------------------------------------------------ checks that need the env
def check_env_id(env_id: str, imports: list[str] | None = None) -> None:
    """Raise ConfigError for an id Gymnasium does not know (after importing the modules that
    register ids: the project's own tasks, `imports`, and a "module:EnvId" id's module),
    suggesting close matches."""
    import gymnasium as gym

    from embodied_ppo.vecenv.gymnasium_backend import OWN_TASKS

    for i, name in enumerate(imports or []):
        _import(name, f"env.imports[{i}]")
    _import(OWN_TASKS, "env.id")
    module, _, name = env_id.rpartition(":")
    if module:
        _import(module, "env.id")
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry.keys()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    where = f" (after importing {module!r})" if module else ""
    raise ConfigError(f"env.id: unknown environment {name!r}{where}{hint}")


def _import(module: str, key: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except Exception as exc:  # not found, or the module itself fails
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ConfigError(
            f"{key}: cannot import {module!r} ({type(exc).__name__}: {text})"
        ) from None


def _check_wrappers(cfg: EnvConfig) -> list[type]:
    import gymnasium as gym

    from embodied_ppo.vecenv.gymnasium_backend import resolve_wrapper

    wrappers = []
    for i, w in enumerate(cfg.wrappers):
        key = f"env.wrappers[{i}].name"
        if ":" in w.name:
            _import(w.name.partition(":")[0], key)
        try:
            wrapper = resolve_wrapper(w.name)
        except AttributeError:
            names = [n for n in dir(gym.wrappers) if n[0].isupper()]
            close = difflib.get_close_matches(w.name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{key}: unknown wrapper {w.name!r}: expected a gymnasium.wrappers name "
                f"(e.g. FlattenObservation) or module:Class{hint}"
            ) from None
        if not (isinstance(wrapper, type) and issubclass(wrapper, gym.Wrapper)):
            raise ConfigError(f"{key}: {w.name!r} is not a gymnasium.Wrapper class")
        wrappers.append(wrapper)
    return wrappers


def _spaces(cfg: EnvConfig) -> SpaceInfo:
    """Build one env of `cfg` to read its spaces."""
    from embodied_ppo.vecenv.base import UnsupportedSpace, describe_spaces
    from embodied_ppo.vecenv.gymnasium_backend import make_one

    check_env_id(cfg.id, cfg.imports)
    wrappers = _check_wrappers(cfg)
    try:
        env = make_one(cfg, wrap=False)
    except ValueError as exc:
        key = getattr(exc, "key", None)  # a task's own refusal of one of its arguments
        if not isinstance(key, str):
            raise _cannot_create(cfg, exc) from None
        raise ConfigError(f"env.kwargs.{key}: {_first_line(exc)}") from None
    except TypeError as exc:
        raise ConfigError(
            f"env.kwargs: {cfg.id} rejected the arguments {cfg.kwargs}: {exc}"
        ) from None
    except Exception as exc:  # a missing optional dependency, a broken env module, ...
        raise _cannot_create(cfg, exc) from None
    for i, (w, wrapper) in enumerate(zip(cfg.wrappers, wrappers, strict=True)):
        try:
            env = wrapper(env, **w.kwargs)
        except Exception as exc:
            env.close()
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise ConfigError(
                f"env.wrappers[{i}].kwargs: {w.name} rejected {w.kwargs} "
                f"({type(exc).__name__}: {text})"
            ) from None
    try:
        return describe_spaces(env.observation_space, env.action_space)
    except UnsupportedSpace as exc:
        raise ConfigError(f"env.id: {cfg.id} has {exc}; {_supported(exc)}") from None
    finally:
        env.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _cannot_create(cfg: EnvConfig, exc: BaseException) -> ConfigError:
    return ConfigError(f"env.id: cannot create {cfg.id} ({type(exc).__name__}: {_first_line(exc)})")


def _spaces_for_envpool(cfg: EnvConfig) -> SpaceInfo:
    try:
        return _spaces(cfg)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc} (env.backend envpool: evaluation runs the Gymnasium task with the same "
            "env.kwargs)"
        ) from None


def _supported(exc: UnsupportedSpace) -> str:
    import gymnasium as gym

    if exc.why == "channels first":
        return (
            "images must be (height, width, channels) uint8, channels last: transpose it, "
            "e.g. with a wrapper in env.wrappers"
        )
    if exc.which == "observation" and exc.why == "an image":
        return "give the image as a key of a Dict observation space (channels last uint8)"
    if exc.which.startswith("observation"):
        return (
            "supported: a flat Box, or a Dict of flat Boxes and (height, width, channels) "
            "uint8 images (flatten others, e.g. env.wrappers: [{name: FlattenObservation}])"
        )
    if isinstance(exc.space, gym.spaces.Discrete):
        return "Discrete actions must start at 0"
    return "supported: flat Box (Gaussian head) or Discrete (categorical head)"


def check_env(cfg: Config) -> SpaceInfo:
    """Everything about `cfg` that needs the environment (one is built); returns its SpaceInfo."""
    if cfg.env.backend == "envpool":
        from embodied_ppo.vecenv.envpool_backend import plan

        info = plan(cfg.env, _spaces_for_envpool).info
    else:
        info = _spaces(cfg.env)
    check_policy(cfg, info)
    return info


def check_policy(cfg: Config, info: SpaceInfo) -> None:
    """What the model and algorithm blocks require of the environment's spaces and limits."""
    m = cfg.model
    if m.head != "auto" and m.head != info.action_kind:
        raise ConfigError(
            f"model.head: got {m.head!r} but {cfg.env.id} needs {info.action_kind!r} for its "
            "action space; use auto"
        )
    _check_obs_keys(cfg, info)
    _check_episodic(cfg)


def _check_obs_keys(cfg: Config, info: SpaceInfo) -> None:
    """model.actor_obs_keys / critic_obs_keys name keys of the Dict observation; images fit the
    CNN; an asymmetric critic has a network of its own."""
    m = cfg.model
    if info.obs_keys is None:
        for name in ("actor_obs_keys", "critic_obs_keys"):
            if getattr(m, name) is not None:
                raise ConfigError(
                    f"model.{name}: got {getattr(m, name)}, but {cfg.env.id} has flat Box "
                    "observations; observation keys apply to Dict observations (use null)"
                )
        return
    if cfg.env.backend == "envpool":
        raise ConfigError(
            f"env.backend: {cfg.env.id} has Dict observations, which the envpool backend does "
            "not take; use sync or async"
        )
    keys = list(info.obs_keys)
    for name in ("actor_obs_keys", "critic_obs_keys"):
        given = getattr(m, name)
        if given is None:
            continue
        if not given:
            raise ConfigError(
                f"model.{name}: got [], expected null (all keys) or some of: {', '.join(keys)}"
            )
        for i, key in enumerate(given):
            if key not in info.obs_keys:
                close = difflib.get_close_matches(str(key), keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"model.{name}[{i}]: got {key!r}, the observation keys of {cfg.env.id} are "
                    f"{', '.join(keys)}{hint}"
                )
    actor = m.actor_obs_keys or keys
    critic = m.critic_obs_keys or actor
    if m.share_backbone and sorted(critic) != sorted(actor):
        raise ConfigError(
            f"model.critic_obs_keys: got {m.critic_obs_keys} with model.share_backbone true; a "
            "critic that sees other keys than the actor needs its own network "
            "(model.share_backbone: false)"
        )
    for key in set(actor) | set(critic):
        spec = info.obs_keys[key]
        if spec.kind == "image":
            from embodied_ppo.modules.encoders import CNNSpec, cnn_output_size

            cnn = CNNSpec(m.cnn_channels, m.cnn_features, m.cnn_kernels, m.cnn_strides, m.cnn_head)
            if cnn_output_size(spec.shape, cnn) < 1:
                raise ConfigError(
                    f"model.cnn_channels: {len(m.cnn_channels)} layers (kernels "
                    f"{[k for k, _ in cnn.layers]}, strides {[s for _, s in cnn.layers]}) shrink "
                    f"the {key!r} image {spec.shape[0]}x{spec.shape[1]} to nothing; use fewer or "
                    "smaller layers, or larger images"
                )


def _check_episodic(cfg: Config) -> None:
    """Critic-free estimators collect whole episodes: the time limit must fit in a rollout."""
    from embodied_ppo.vecenv.gymnasium_backend import episode_limit

    a = cfg.algorithm
    if a.adv_type not in CRITIC_FREE:
        return
    limit = episode_limit(cfg.env)
    if limit is None:
        raise ConfigError(
            f"env.max_episode_steps: {cfg.env.id} has no time limit; adv_type {a.adv_type!r} "
            "collects whole episodes, set env.max_episode_steps"
        )
    if a.rollout_steps < limit:
        raise ConfigError(
            f"algorithm.rollout_steps: got {a.rollout_steps}; adv_type {a.adv_type!r} collects "
            f"one whole episode per env, so it must be >= the episode limit {limit} "
            "(env.max_episode_steps)"
        )


# ------------------------------------------------------------------ machine and policy
def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; an unavailable cuda is a config error."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.device: got {name!r} but no CUDA device is available; use auto or cpu"
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"trainer.device: got {name!r} but only {torch.cuda.device_count()} CUDA "
                "device(s) exist"
            )
    return torch.device(name)


# Above this many envs per forward, torch on the training device beats numpy on the host.
HOST_INFERENCE_MAX_ENVS = 256


def inference_path(mode: str, policy: torch.nn.Module, num_envs: int) -> str:
    """`host` (numpy snapshot) or `device` (torch) for `trainer.inference: auto | host | device`."""
    from embodied_ppo.modules.snapshot import unsupported_part

    missing = unsupported_part(policy)
    if mode == "host" and missing is not None:
        raise ConfigError(
            f"trainer.inference: got 'host', but the numpy snapshot has no {missing}; use auto "
            "or device"
        )
    if mode == "auto":
        return "host" if num_envs <= HOST_INFERENCE_MAX_ENVS and missing is None else "device"
    return mode


# ------------------------------------------------------------------ resume
def check_resume_overrides(overrides: list[str]) -> None:
    """A resumed run may change only keys that do not change what it learns."""
    for text in overrides:
        key = ".".join(parse_override(text)[0])
        if key not in RESUMABLE_KEYS and ".".join(key.split(".")[:2]) not in RESUMABLE_KEYS:
            raise ConfigError(
                f"{key}: cannot change when resuming; allowed: {', '.join(sorted(RESUMABLE_KEYS))}"
            )


def per_process(cfg: Config, world: int) -> Config:
    """The config one of `world` processes runs: num_envs_scope global splits num_envs."""
    import copy

    if cfg.env.num_envs_scope != "global" or world == 1:
        return cfg
    e = cfg.env
    if e.num_envs % world:
        raise ConfigError(
            f"env.num_envs: got {e.num_envs} with num_envs_scope global, expected a multiple "
            f"of the {world} processes"
        )
    local = copy.deepcopy(cfg)
    local.env.num_envs = e.num_envs // world
    return check_config(local)
