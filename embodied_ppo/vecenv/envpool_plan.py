"""How an `env:` block maps onto envpool: its id, its keyword arguments (renamed, ranges, refusals) and its spaces, checked against the Gymnasium task's."""

from __future__ import annotations

import difflib
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.system import usable_cores
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import ConfigValue
from embodied_ppo.vecenv.make import episode_limit, make_one
from embodied_ppo.vecenv.spaces import SpaceInfo, describe_spaces

INSTALL_HINT = (
    "env.backend: 'envpool' needs the envpool package: pip install 'embodied-ppo[envpool]'"
)


# envpool make arguments that describe the pool rather than the task: the adapter sets them.
_POOL_KEYS = frozenset(
    {
        "num_envs",
        "batch_size",
        "num_threads",
        "max_num_players",
        "thread_affinity_offset",
        "base_path",
        "seed",
        "env_seed",
        "gym_reset_return_info",
        "max_episode_steps",
    }
)


# Task arguments that envpool reads differently from Gymnasium, so one value cannot suit both.
_DIFFERENT_MEANING = {
    "xml_file": "envpool loads the model files it ships, Gymnasium a path of yours",
}


_NO_LIMIT = 2**31 - 1  # envpool's own time limit, effectively off (the adapter applies the limit)


@dataclass
class _Plan:
    """What the pool is built from: validated task arguments, spaces and the time limit."""

    info: SpaceInfo
    make_kwargs: dict[str, ConfigValue]
    limit: int | None


def _import_envpool() -> ModuleType:
    """The envpool module, or a ConfigError saying how to install it."""
    try:
        import envpool  # in the function: an optional dependency
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return envpool


def _type_ok(value: ConfigValue, default: object) -> bool:
    """Whether `value` fits the type of envpool's default for the argument."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _gym_params(env_id: str) -> set[str] | None:
    """The named arguments of the Gymnasium env class behind `env_id` (None: unknown)."""
    entry = gym.spec(env_id).entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        params = inspect.signature(creator).parameters.values()
    except (ValueError, TypeError, ImportError, AttributeError):
        return None
    return {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _map_range(
    cfg: EnvConfig, key: str, value: ConfigValue, defaults: dict[str, object]
) -> dict[str, ConfigValue]:
    """Gymnasium's `<name>_range: [low, high]` as envpool's `<name>_min` / `<name>_max`.

    A bound envpool has no argument for must be the unbounded one (-.inf or .inf).
    """
    path = f"env.kwargs.{key}"
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise ConfigError(f"{path}: got {value!r}, expected [low, high]")
    base = key.removesuffix("_range")
    mapped = {}
    for name, bound, unbounded in (
        (f"{base}_min", value[0], -math.inf),
        (f"{base}_max", value[1], math.inf),
    ):
        if name in defaults:
            mapped[name] = float(bound)
        elif bound != unbounded:
            raise ConfigError(
                f"{path}: got {value!r}, but envpool's {cfg.id} has no {name}, so that bound "
                f"must be {'-.inf' if unbounded < 0 else '.inf'} (use env.backend sync or async)"
            )
    return mapped


def _check_kwargs(cfg: EnvConfig, defaults: dict[str, object]) -> dict[str, ConfigValue]:
    """`env.kwargs` as envpool task arguments of the right type, or a ConfigError.

    Keys go to envpool unchanged, except Gymnasium's `<name>_range` pairs, which envpool takes
    as `<name>_min` and `<name>_max`.
    """
    task_keys = [k for k in defaults if k not in _POOL_KEYS and k not in _DIFFERENT_MEANING]
    gym_params = _gym_params(cfg.id)
    if gym_params is not None:  # list what both backends take
        task_keys = [k for k in task_keys if k in gym_params] + [
            f"{k.removesuffix('_min')}_range"
            for k in task_keys
            if k.endswith("_min") and f"{k.removesuffix('_min')}_range" in gym_params
        ]
    takes = ", ".join(sorted(task_keys)) or "none"
    make_kwargs: dict[str, ConfigValue] = {}
    for key, value in cfg.kwargs.items():
        path = f"env.kwargs.{key}"
        if key == "max_episode_steps":
            raise ConfigError(f"{path}: set env.max_episode_steps instead (env.backend envpool)")
        if key in _DIFFERENT_MEANING:
            raise ConfigError(
                f"{path}: not supported with env.backend envpool ({_DIFFERENT_MEANING[key]}); "
                "use env.backend sync or async"
            )
        if key in _POOL_KEYS:
            raise ConfigError(
                f"{path}: an envpool pool setting, not a task argument; embodied-ppo sets it "
                "(env.num_envs, trainer.seed, threads = available cores)"
            )
        base = key.removesuffix("_range")
        if key.endswith("_range") and ({f"{base}_min", f"{base}_max"} & defaults.keys()):
            make_kwargs.update(_map_range(cfg, key, value, defaults))
            continue
        if key not in defaults:
            close = difflib.get_close_matches(key, task_keys, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"{path}: envpool's {cfg.id} has no such argument; {hint}with env.backend "
                f"envpool it takes: {takes} (or use env.backend sync or async)"
            )
        if not _type_ok(value, defaults[key]):
            raise ConfigError(
                f"{path}: got {value!r}, expected a {type(defaults[key]).__name__} "
                f"(envpool's default is {defaults[key]!r})"
            )
        make_kwargs[key] = value
    return make_kwargs


def _spec_space_info(spec: Any) -> SpaceInfo | None:  # envpool's spec: untyped
    with warnings.catch_warnings():
        # envpool builds float32 Boxes from float64 bounds; gymnasium warns about the cast.
        warnings.simplefilter("ignore")
        try:
            return describe_spaces(spec.gymnasium_observation_space, spec.gymnasium_action_space)
        except ValueError:
            return None


def _gymnasium_space_info(cfg: EnvConfig) -> SpaceInfo:
    env = make_one(cfg)
    try:
        return describe_spaces(env.observation_space, env.action_space)
    finally:
        env.close()


def _same_spaces(a: SpaceInfo, b: SpaceInfo) -> bool:
    if (a.obs_dim, a.action_kind, a.action_dim) != (b.obs_dim, b.action_kind, b.action_dim):
        return False
    if a.action_low is None or b.action_low is None:
        return a.action_low is None and b.action_low is None
    return bool(
        np.allclose(a.action_low, b.action_low, rtol=1e-6)
        and np.allclose(a.action_high, b.action_high, rtol=1e-6)
    )


def check_id(cfg: EnvConfig) -> ModuleType:
    """The envpool module, once `cfg.id` is known to be a task both envpool and Gymnasium have."""
    envpool = _import_envpool()
    known = envpool.list_all_envs()
    if cfg.id not in known:
        close = difflib.get_close_matches(cfg.id, known, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise ConfigError(
            f"env.id: envpool does not provide {cfg.id!r}; {hint}use env.backend sync or async for it"
        )
    if cfg.id not in gym.registry:
        raise ConfigError(
            f"env.id: {cfg.id!r} is an envpool task that Gymnasium does not provide; env.backend "
            "envpool needs a task both provide (evaluation runs the Gymnasium version)"
        )
    return envpool


def plan(cfg: EnvConfig, gym_spaces: Callable[[EnvConfig], SpaceInfo] | None = None) -> _Plan:
    """Check `cfg` for the envpool backend (every problem is a one-line ConfigError) and plan
    the pool. `gym_spaces` reads (and checks) the spaces of the Gymnasium task, which evaluation
    runs; by default they are read without checks (`validate` has done them)."""
    envpool = check_id(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defaults = envpool.make_spec(cfg.id).config._asdict()
    make_kwargs = _check_kwargs(cfg, defaults)
    gym_info = (gym_spaces or _gymnasium_space_info)(replace(cfg, backend="sync"))
    try:
        spec = envpool.make_spec(cfg.id, **make_kwargs)
    except Exception as exc:
        raise ConfigError(
            f"env.kwargs: envpool's {cfg.id} rejected {cfg.kwargs}: {first_line(exc)}"
        ) from None
    info = _spec_space_info(spec)
    if info is None or not _same_spaces(info, gym_info):
        theirs = (
            f"observations {info.obs_dim} vs {gym_info.obs_dim}, actions {info.action_kind} "
            f"{info.action_dim} vs {gym_info.action_kind} {gym_info.action_dim}"
            if info is not None
            else "spaces the policy cannot take"
        )
        raise ConfigError(
            f"env.id: envpool's {cfg.id} has other spaces than Gymnasium's ({theirs}); "
            "use env.backend sync or async"
        )
    return _Plan(gym_info, make_kwargs, episode_limit(cfg))


def default_threads(num_envs: int) -> int:
    """Threads for the pool: one per core this process may run on, at most one per env."""
    return max(1, min(num_envs, usable_cores()))
