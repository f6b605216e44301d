"""Typed configuration: YAML plus dotted overrides into validated dataclasses.

Every key has one meaning and is either honored or rejected (DESIGN Rule 4). Validation runs
before anything is written to disk and raises :class:`ConfigError` with one line naming the key
path, the value given and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from embodied_ppo.errors import ConfigError


@dataclass
class EnvConfig:
    """The `env:` block."""

    id: str | None = None
    num_envs: int = 8
    backend: Literal["sync", "async", "envpool"] = "sync"
    # sync backend: threads stepping the envs (MuJoCo simulates without holding the GIL).
    threads: int = 1
    kwargs: dict = field(default_factory=dict)
    max_episode_steps: int | None = None
    num_envs_scope: Literal["per_process", "global"] = "per_process"
    normalize_obs: bool = True
    clip_obs: float | None = 10.0
    normalize_reward: bool = True
    clip_reward: float | None = 10.0


@dataclass
class ModelConfig:
    """The `model:` block."""

    share_backbone: bool = True
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu", "elu", "gelu", "silu", "leaky_relu"] = "tanh"
    head: Literal["auto", "gaussian", "categorical"] = "auto"
    log_std_init: float = 0.0
    state_dependent_std: bool = False
    init: Literal["orthogonal", "torch_default"] = "orthogonal"
    init_from: str | None = None


KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
KLType = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"]
CRITIC_FREE = ("grpo", "rloo", "reinforce_plus_plus")


@dataclass
class KLCtrlConfig:
    """`algorithm.kl_ctrl:` the in-reward KL coefficient controller."""

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass
class AlgorithmConfig:
    """The `algorithm:` block; the first keys keep the source documents' names verbatim."""

    normalize_advantages: bool = True
    group_size: int = 1
    adv_type: Literal["gae", "grpo", "rloo", "reinforce_plus_plus"] = "gae"
    loss_type: Literal["actor_critic", "actor"] = "actor_critic"
    loss_agg_func: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    rollout_micro_batch_size: int | None = None
    logprob_forward_micro_batch_size: int | None = None
    entropy_bonus: float = 0.0
    clip_ratio_high: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_c: float | None = None
    value_clip: float | None = 0.2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    huber_delta: float | None = 10.0
    # Our additions.
    rollout_steps: int = 256
    update_epochs: int = 10
    minibatch_size: int = 512
    micro_batch_size: int | None = None
    value_loss_coef: float = 0.5
    recompute_old_logprobs: bool = False
    early_stop_kl: float | None = None
    # KL control against a frozen reference policy.
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: KLType = "low_var_kl"
    use_kl_in_reward: bool = False
    kl_penalty: KLType = "kl"
    kl_ctrl: KLCtrlConfig = field(default_factory=KLCtrlConfig)
    reference_checkpoint: str | None = None


@dataclass
class OptimConfig:
    """The `optim:` block."""

    lr: float = 3e-4
    schedule: Literal["constant", "linear", "adaptive"] = "constant"
    desired_kl: float = 0.01
    lr_min: float = 1e-5
    lr_max: float = 1e-2
    adam_eps: float = 1e-5
    max_grad_norm: float | None = 0.5


@dataclass
class TrainerConfig:
    """The `trainer:` block."""

    total_steps: int = 1_000_000
    seed: int = 0
    device: str = "auto"
    run_dir: str | None = None
    log_interval: int = 1
    checkpoint_interval: int = 10
    torch_threads: int | None = None
    inference: Literal["auto", "host", "device"] = "auto"
    update: Literal["auto", "host", "torch"] = "auto"
    compile: bool = False
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    dist_timeout: float = 1800.0
    # Evaluation during training: deterministic episodes every eval_interval iterations (and
    # after the last); null turns it off. A video of the first episode every video_interval
    # evaluations (null: no videos).
    eval_interval: int | None = None
    eval_episodes: int = 10
    video_interval: int | None = None


@dataclass
class Config:
    """The whole configuration."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML- and checkpoint-safe)."""
        return dataclasses.asdict(self)

    @property
    def batch_size(self) -> int:
        """Transitions per iteration: rollout_steps x num_envs."""
        return self.algorithm.rollout_steps * self.env.num_envs


# Names users may bring from other libraries; suggested when they appear as unknown keys.
_ALIASES = {
    "ppo_epochs": "update_epochs",
    "n_epochs": "update_epochs",
    "num_epochs": "update_epochs",
    "n_steps": "rollout_steps",
    "num_steps": "rollout_steps",
    "batch_size": "minibatch_size",
    "clip_range": "clip_ratio_high",
    "clip_coef": "clip_ratio_high",
    "ent_coef": "entropy_bonus",
    "vf_coef": "value_loss_coef",
    "lam": "gae_lambda",
    "learning_rate": "lr",
    "env_id": "id",
    "n_envs": "num_envs",
}


def _fmt(value: Any) -> str:
    return (
        repr(value)
        if isinstance(value, str)
        else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    )


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(
            "null" if a is type(None) else _type_name(a) for a in typing.get_args(tp)
        )
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if tp is dict or origin is dict:
        return "a mapping"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, str(tp)
    )


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp`; return it (ints widened to float)."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{path}: got {_fmt(value)}, expected {_type_name(tp)}")
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise bad
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        if value in typing.get_args(tp) and isinstance(value, str):
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in typing.get_args(tp)], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{path}: got {_fmt(value)}, allowed: {_type_name(tp)}{hint}")
    if origin is list:
        if not isinstance(value, list):
            raise bad
        return [_coerce(v, typing.get_args(tp)[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ConfigError(f"{path}: got {_fmt(value)}, expected a finite number")
            return float(value)
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    raise TypeError(f"unsupported annotation {tp!r} at {path}")  # programming error


def _unknown_key(key: str, allowed: list[str], path: str) -> ConfigError:
    suggestion = _ALIASES.get(key) if _ALIASES.get(key) in allowed else None
    if suggestion is None:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        prefixed = [a for a in allowed if key.startswith(a) or a.startswith(key)]
        suggestion = close[0] if close else (prefixed[0] if prefixed else None)
    where = f"{path}.{key}" if path else key
    hint = f"; did you mean {suggestion!r}?" if suggestion else f"; allowed: {', '.join(allowed)}"
    return ConfigError(f"{where}: unknown key{hint}")


def _build(cls: type, data: Any, path: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: got {_fmt(data)}, expected a mapping of keys")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in names:
            raise _unknown_key(str(key), names, path)
        sub = f"{path}.{key}" if path else key
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, sub)
        else:
            kwargs[key] = _coerce(value, tp, sub)
    return cls(**kwargs)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


_NUMBER_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def validate(cfg: Config) -> Config:
    """Check ranges and combinations that the types alone cannot express."""
    e, m, a, o, t = cfg.env, cfg.model, cfg.algorithm, cfg.optim, cfg.trainer
    _check(e.id is not None and e.id.strip() != "", "env.id: required, e.g. env.id=Humanoid-v5")
    _check(e.num_envs >= 1, f"env.num_envs: got {e.num_envs}, expected an integer >= 1")
    _check(e.threads >= 1, f"env.threads: got {e.threads}, expected an integer >= 1")
    _check(
        e.threads == 1 or e.backend == "sync",
        f"env.threads: got {e.threads} with backend {e.backend!r}; threads apply to the sync backend "
        "(async uses one process per env, envpool one thread per core)",
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
    _check(
        -20.0 <= m.log_std_init <= 2.0,
        f"model.log_std_init: got {m.log_std_init}, expected a number in [-20, 2]",
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
    _check(
        1 <= a.minibatch_size <= batch and batch % a.minibatch_size == 0,
        f"algorithm.minibatch_size: got {a.minibatch_size}, expected a divisor of "
        f"algorithm.rollout_steps x env.num_envs = {batch} (e.g. {_divisors_hint(batch)})",
    )
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
        t.update != "host" or m.activation != "gelu",
        "trainer.update: got 'host', which does not support model.activation 'gelu'; use auto or torch",
    )
    _check(
        t.update != "host" or not t.device.startswith("cuda"),
        "trainer.update: got 'host', which runs on the CPU only; use auto or torch with a cuda device",
    )
    _check(
        t.update != "host" or not (a.use_kl_loss or t.compile),
        "trainer.update: got 'host', which has no KL loss and no torch.compile; use auto or torch",
    )
    _check(
        t.log_interval >= 1, f"trainer.log_interval: got {t.log_interval}, expected an integer >= 1"
    )
    _check(
        t.checkpoint_interval >= 1,
        f"trainer.checkpoint_interval: got {t.checkpoint_interval}, expected an integer >= 1",
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


def _divisors_hint(n: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    mid = [d for d in divs if 32 <= d <= 4096] or divs
    return ", ".join(str(d) for d in mid[-4:])


def from_dict(data: Any) -> Config:
    """Build and validate a Config from a nested mapping."""
    return validate(_build(Config, data, ""))


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse `a.b.c=value` (value in YAML syntax) into (["a", "b", "c"], value)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. trainer.seed=3")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. trainer.seed=3")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"override {text!r}: value {raw!r} is not valid YAML") from None
    if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e6 as a string; on a command line it is a number
    return parts, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each dotted override in a copy of `data` (a nested dict)."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[: i + 1])} is not a block")
            node = child
        node[parts[-1]] = value
    return data


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping, turning file and syntax problems into ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}:{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of blocks (env:, model:, ...), got {type(data).__name__}"
        )
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load YAML (or start from defaults when `path` is None), apply overrides, validate."""
    data = load_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    return from_dict(data)


def dump_yaml(cfg: Config) -> str:
    """The resolved config as YAML text (what ran, key for key)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)
