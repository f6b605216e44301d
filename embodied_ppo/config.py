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
class WrapperConfig:
    """One entry of `env.wrappers`: a Gymnasium wrapper and its keyword arguments."""

    name: str = ""
    kwargs: dict = field(default_factory=dict)


@dataclass
class EnvConfig:
    """The `env:` block."""

    # A registered Gymnasium id, or Gymnasium's "module:EnvId" (the module registers it).
    id: str | None = None
    num_envs: int = 8
    backend: Literal["sync", "async", "envpool"] = "sync"
    # sync backend: processes stepping the envs (this one included), and threads stepping each
    # process's envs (MuJoCo simulates without holding the GIL).
    processes: int = 1
    threads: int = 1
    kwargs: dict = field(default_factory=dict)
    # Modules imported before an env is made (in every process), e.g. to register ids.
    imports: list[str] = field(default_factory=list)
    # Applied in order around each env, innermost first.
    wrappers: list[WrapperConfig] = field(default_factory=list)
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
    # Dict observations: the keys the actor reads (null: all) and those the critic reads (null:
    # the actor's); image keys go through a CNN with these channels, kernels and strides (null:
    # 8/4, 4/2, then 3/1), whose last map is flattened or reduced to keypoints by a spatial
    # softmax, to cnn_features features.
    actor_obs_keys: list[str] | None = None
    critic_obs_keys: list[str] | None = None
    cnn_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    cnn_kernels: list[int] | None = None
    cnn_strides: list[int] | None = None
    cnn_head: Literal["flatten", "spatial_softmax"] = "flatten"
    cnn_features: int = 128
    # A recurrent core between the observation encoders and the MLP (the actor's, and a
    # separate critic's own): null (none), lstm or gru, with its state size and layers.
    recurrent: Literal["lstm", "gru"] | None = None
    recurrent_size: int = 128
    recurrent_layers: int = 1


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
    # Recurrent policies: the update trains on chunks of this many steps of one env, each
    # starting from the state stored at its first step (null: the whole rollout of each env).
    sequence_length: int | None = None
    value_loss_coef: float = 0.5
    recompute_old_logprobs: bool = False
    # Values, advantages and returns again before every epoch after the first, under the
    # critic as it is then (with the rollout's own rewards and bootstrap observations).
    recompute_advantages: bool = False
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
class WandbConfig:
    """`trainer.wandb:` Weights & Biases logging (pip install 'embodied-ppo[wandb]')."""

    project: str | None = None  # null: no W&B logging
    entity: str | None = None
    name: str | None = None  # null: the run directory's name
    mode: Literal["online", "offline"] = "online"
    tags: list[str] = field(default_factory=list)


@dataclass
class TrainerConfig:
    """The `trainer:` block."""

    total_steps: int = 1_000_000
    seed: int = 0
    device: str = "auto"
    run_dir: str | None = None
    log_interval: int = 1
    checkpoint_interval: int = 10
    # Keep the newest this many ckpt_<step>.pt (latest.pt and best.pt stay); null: all.
    keep_checkpoints: int | None = None
    torch_threads: int | None = None
    inference: Literal["auto", "host", "device"] = "auto"
    # Compile the update's gradient step (falls back to eager, with a note, where it cannot).
    compile: bool = True
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    dist_timeout: float = 1800.0
    # Evaluation during training: deterministic episodes every eval_interval iterations (and
    # after the last); null turns it off. A video of the first episode every video_interval
    # evaluations (null: no videos).
    eval_interval: int | None = None
    eval_episodes: int = 10
    video_interval: int | None = None
    wandb: WandbConfig = field(default_factory=WandbConfig)


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
    if tp is dict or origin is dict or dataclasses.is_dataclass(tp):
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
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
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


# Keys that earlier versions accepted, and what replaced them.
_REMOVED = {
    "trainer.update": "the update always runs in torch now (compiled: see trainer.compile)",
}


def _unknown_key(key: str, allowed: list[str], path: str) -> ConfigError:
    where = f"{path}.{key}" if path else key
    if where in _REMOVED:
        return ConfigError(f"{where}: no longer a key; {_REMOVED[where]}")
    suggestion = _ALIASES.get(key) if _ALIASES.get(key) in allowed else None
    if suggestion is None:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        prefixed = [a for a in allowed if key.startswith(a) or a.startswith(key)]
        suggestion = close[0] if close else (prefixed[0] if prefixed else None)
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


_NUMBER_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A config that an earlier version wrote (a run's config.yaml or checkpoint), without the
    keys that no longer exist. Only for a run's own saved config: a config a user writes with a
    removed key is refused (`_REMOVED` says what replaced it)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for key in _REMOVED:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out


def from_dict(data: Any) -> Config:
    """Build a Config from a nested mapping and check it (`validate.check_config`)."""
    from embodied_ppo.validate import check_config

    return check_config(_build(Config, data, ""))


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


def set_dotted(data: dict, parts: list[str], value: Any, text: str | None = None) -> dict:
    """A copy of the nested dict `data` with the key path `parts` set to `value`."""
    import copy

    data = copy.deepcopy(data)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            where = text if text is not None else ".".join(parts)
            raise ConfigError(f"override {where!r}: {'.'.join(parts[: i + 1])} is not a block")
        node = child
    node[parts[-1]] = value
    return data


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each dotted override in a copy of `data` (a nested dict)."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        data = set_dotted(data, parts, value, text)
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
