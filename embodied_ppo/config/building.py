"""Typed building of a Config from a nested mapping: types checked key by key, unknown keys refused with the closest name, then the pure checks (`checks.check_config`)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import types
import typing
from typing import Literal, TypeVar

import yaml

from embodied_ppo.config.auxiliary import RNDConfig, SymmetryConfig
from embodied_ppo.config.checks import check_config
from embodied_ppo.config.distill_schema import DistillConfig, FinetuneConfig
from embodied_ppo.config.intervals import fill_interval_units
from embodied_ppo.config.schema import Config, ModelConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.types import ConfigDict, ConfigValue

T = TypeVar("T")

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


def _fmt(value: ConfigValue) -> str:
    """`value` as a message quotes it: a string in quotes, plain data as inline YAML, any other
    object (an env, a numpy number) by its type."""
    if isinstance(value, str):
        return repr(value)
    try:
        return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    except yaml.YAMLError:  # not plain data: YAML has no form for it
        kind = type(value)
        return f"a {kind.__module__}.{kind.__qualname__} object"


def _type_name(tp: object) -> str:
    """An annotation of the schema (a type, Literal, union or list of one) in a user's words."""
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


def _coerce(value: ConfigValue, tp: object, path: str) -> object:
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
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)  # a numpy integer too: the config holds plain values
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        raise bad
    if tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
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


def _build(cls: type[T], data: ConfigValue, path: str) -> T:
    """The dataclass `cls` from the mapping `data` at key path `path`, key by key."""
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


def upgrade(data: ConfigDict) -> ConfigDict:
    """A config that an earlier version wrote (a run's config.yaml or checkpoint), without the
    keys that no longer exist. Only for a run's own saved config: a config a user writes with a
    removed key is refused (`_REMOVED` says what replaced it)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for key in _REMOVED:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    # Saved before distillation and the observation history existed: a PPO run without one.
    out.setdefault("distill", dataclasses.asdict(DistillConfig()))
    out.setdefault("finetune", dataclasses.asdict(FinetuneConfig()))
    if isinstance(out.get("model"), dict):
        out["model"].setdefault("history_length", ModelConfig().history_length)
        # Saved before the actor's key group existed: no group.
        for field in dataclasses.fields(ModelConfig):
            if field.name.startswith("actor_group_"):
                out["model"].setdefault(field.name, getattr(ModelConfig(), field.name))
    algo = out.get("algorithm")
    if isinstance(algo, dict) and "minibatch_scope" not in algo:
        # Saved before the key existed, when a process's minibatch was minibatch_size of its
        # own transitions: the run goes on taking as many gradient steps of as many.
        algo["minibatch_scope"] = "per_process"
    if isinstance(algo, dict):
        # Saved before these keys existed, by a version that had none of these terms.
        algo.setdefault("normalize_value", False)
        algo.setdefault("symmetry", dataclasses.asdict(SymmetryConfig()))
        algo.setdefault("rnd", dataclasses.asdict(RNDConfig()))
    if isinstance(out.get("optim"), dict):
        # Saved before the KL target could fall: the target was desired_kl throughout.
        out["optim"].setdefault("desired_kl_final", None)
    return out


def from_dict(data: ConfigValue, world: int | None = None) -> Config:
    """Build a Config from a nested mapping and check it (`checks.check_config`) for a run of
    `world` processes (default: as many as torchrun started this one among)."""
    return check_config(_build(Config, fill_interval_units(data), ""), world)
