"""How an `env:` block with `backend: mjlab` becomes an mjlab task: the optional import, the
task id, env.kwargs and the time limit on the task's env config, building the batched env
quietly, its spaces, and whether `num_envs` of it fit in the device's memory.

mjlab (an optional dependency, `pip install -e ".[mjlab]" torch==<the installed torch>`: see
`install_hint`) registers its tasks when
`mjlab.tasks` is imported; every task is a `ManagerBasedRlEnvCfg` that builds one
`ManagerBasedRlEnv` stepping all of its envs at once on one device with MuJoCo Warp.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import io
import logging
import os
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.text import first_line
from embodied_ppo.vecenv.spaces import SpaceInfo, UnsupportedSpace, describe_spaces


def install_hint() -> str:
    """How to install the mjlab extra, naming the torch installed here: mjlab's rsl-rl-lib asks
    for torchvision, whose newest release needs a newer torch, and without the pin pip replaces
    a CPU build of torch with a CUDA build of the next version (docs/environments.md)."""
    pin = f"torch=={torch.__version__}"
    return (
        f"env.backend: 'mjlab' needs the mjlab package: pip install -e \".[mjlab]\" {pin} in a "
        f"clone (pip install 'embodied-ppo[mjlab]' {pin} otherwise); naming the installed torch "
        "keeps pip from replacing it"
    )


_log = logging.getLogger("embodied_ppo.mjlab")

# The env config fields the backend sets itself (env.kwargs may not).
_OWN_FIELDS = frozenset({"scene", "seed", "auto_reset"})


def import_mjlab() -> ModuleType:
    """mjlab's task registry (importing it registers mjlab's tasks), or a ConfigError saying how
    to install mjlab."""
    try:
        # In the function: mjlab is an optional dependency, and importing it loads MuJoCo Warp.
        import warp

        registry = importlib.import_module("mjlab.tasks.registry")
        importlib.import_module("mjlab.tasks")
        # After mjlab's import, which makes Warp print a line per kernel module it loads.
        warp.config.quiet = True
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("mjlab", "warp", "mujoco_warp"):
            raise ConfigError(install_hint()) from None
        raise ConfigError(
            f"env.backend: mjlab cannot be imported ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    return registry


def task_ids(cfg: EnvConfig) -> list[str]:
    """The registered mjlab task ids (after importing env.imports, which may register more)."""
    registry = import_mjlab()
    for i, name in enumerate(cfg.imports):
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ConfigError(
                f"env.imports[{i}]: cannot import {name!r} ({type(exc).__name__}: "
                f"{first_line(exc)})"
            ) from None
    return list(registry.list_tasks())


def check_task_id(cfg: EnvConfig) -> None:
    """A ConfigError for an id mjlab does not know, naming the closest ones."""
    ids = task_ids(cfg)
    if cfg.id in ids:
        return
    close = difflib.get_close_matches(str(cfg.id), ids, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"env.id: unknown mjlab task {cfg.id!r}{hint} ({len(ids)} tasks are registered)"
    )


def task_config(cfg: EnvConfig, num_envs: int, seed: int, play: bool = False) -> Any:
    """The task's env config (mjlab's `ManagerBasedRlEnvCfg`, a fresh copy) for `num_envs` envs
    seeded with `seed`, with env.kwargs and env.max_episode_steps applied. Episodes are not
    reset inside `step` (auto_reset off): the single env resets them itself after reading their
    final observations (docs/design.md, rule 1); the vector backend lets mjlab reset the
    terminated ones in the step (`mjlab_resets.EpisodeEnds`)."""
    check_task_id(cfg)
    registry = import_mjlab()
    env_cfg = registry.load_env_cfg(cfg.id, play=play)
    fields = {f.name for f in dataclasses.fields(env_cfg)}
    for key, value in cfg.kwargs.items():
        if key in _OWN_FIELDS:
            raise ConfigError(
                f"env.kwargs.{key}: set by the mjlab backend itself (num_envs: env.num_envs, "
                "seed: trainer.seed)"
            )
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields - _OWN_FIELDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"env.kwargs.{key}: not a field of {cfg.id}'s env config "
                f"({type(env_cfg).__name__}){hint}"
            )
        setattr(env_cfg, key, value)
    env_cfg.scene.num_envs = num_envs
    env_cfg.seed = int(seed) % 2**32  # mjlab seeds numpy's global generator with it
    env_cfg.auto_reset = False
    if cfg.max_episode_steps is not None:
        # mjlab's limit is ceil(episode_length_s / step_dt) steps: half a step under the limit
        # gives exactly max_episode_steps whatever the rounding (7 x 0.02 s / 0.02 s is 7.0000001)
        step_dt = env_cfg.sim.mujoco.timestep * env_cfg.decimation
        env_cfg.episode_length_s = (cfg.max_episode_steps - 0.5) * step_dt
    return env_cfg


def build(env_cfg: Any, device: torch.device, render_mode: str | None = None) -> Any:
    """mjlab's batched env of `env_cfg` on `device`, its console tables sent to the debug log."""
    envs_module = importlib.import_module("mjlab.envs")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        env = envs_module.ManagerBasedRlEnv(
            env_cfg, device=_device_name(device), render_mode=render_mode
        )
    _log.debug("%s", text.getvalue())
    return env


def _device_name(device: torch.device) -> str:
    """The device as mjlab names it (cuda:N, cpu)."""
    if device.type == "cuda":
        return f"cuda:{device.index or 0}"
    return device.type


def quietly(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call `fn`, its console output (mjlab prints on seeding) sent to the debug log."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        out = fn(*args, **kwargs)
    if text.getvalue():
        _log.debug("%s", text.getvalue())
    return out


# ------------------------------------------------------------------ spaces
def gym_spaces(env: Any, task: str) -> tuple[gym.spaces.Dict, gym.spaces.Box]:
    """One env's observation space (a Dict: one flat float32 Box per observation group) and
    action space, as Gymnasium spaces; a group that is not one flat vector is a ConfigError."""
    groups = {}
    manager = env.observation_manager
    for name, dim in manager.group_obs_dim.items():
        if not manager.group_obs_concatenate[name] or len(dim) != 1:
            raise ConfigError(
                f"env.id: {task} has observation group {name!r} of shape {dim}; the mjlab "
                "backend takes groups concatenated into one vector each (concatenate_terms, "
                "flatten_history_dim)"
            )
        groups[name] = gym.spaces.Box(-np.inf, np.inf, (int(dim[0]),), np.float32)
    action_dim = int(sum(env.action_manager.action_term_dim))
    actions = gym.spaces.Box(-np.inf, np.inf, (action_dim,), np.float32)
    return gym.spaces.Dict(groups), actions


def space_info(env: Any, task: str) -> SpaceInfo:
    """SpaceInfo of mjlab's env of the task `task` (observation groups as Dict keys)."""
    obs_space, action_space = gym_spaces(env, task)
    try:
        return describe_spaces(obs_space, action_space)
    except UnsupportedSpace as exc:
        raise ConfigError(f"env.id: {task} has {exc}") from None


# ------------------------------------------------------------------ memory
# Device memory a batch needs beyond MuJoCo Warp's arrays (observations, rollout buffer, the
# policy and the update's activations), as a multiple of the simulation's own bytes; and the
# share of the free memory a run may plan to use.
MEMORY_MARGIN = 2.0
USABLE_SHARE = 0.9


def per_env_bytes(env: Any) -> int:
    """Bytes of MuJoCo Warp data per env of a built env: every per-world array of its data,
    divided by the number of worlds."""
    data = env.sim.wp_data
    total = 0
    for value in vars(data).values():
        shape = getattr(value, "shape", None)
        nbytes = getattr(value, "capacity", None) or 0
        if shape and nbytes and shape[0] == env.num_envs:
            total += int(nbytes)
    return max(1, total // max(1, env.num_envs))


def probe_device(name: str) -> torch.device:
    """The device a config's trainer.device names, for building the probe env of the checks
    (the CPU where CUDA is not available: the device check itself comes later)."""
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda" if name == "auto" else name)


def free_memory(device: torch.device) -> int:
    """Free bytes on `device` (a CUDA device's free memory; on the CPU, the available RAM)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 1 << 62  # unknown: do not refuse


def check_memory(cfg: EnvConfig, per_env: int, device: torch.device) -> None:
    """A ConfigError when env.num_envs envs of `per_env` bytes would not fit in `device`'s
    free memory (before anything is built or written)."""
    need = cfg.num_envs * per_env * (1 + MEMORY_MARGIN)
    free = free_memory(device)
    if need <= free * USABLE_SHARE:
        return
    fits = max(1, int(free * USABLE_SHARE / (per_env * (1 + MEMORY_MARGIN))))
    raise ConfigError(
        f"env.num_envs: {cfg.num_envs:,} envs of {cfg.id} need about {_gib(need)} of {device} "
        f"memory and {_gib(free)} is free; use at most about {fits:,}"
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether building or stepping failed for want of device memory (torch's or Warp's)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "failed to allocate" in text


def memory_error(cfg: EnvConfig, device: torch.device, exc: BaseException) -> ConfigError:
    """The one-line ConfigError of a build that ran out of memory."""
    return ConfigError(
        f"env.num_envs: {cfg.num_envs:,} envs of {cfg.id} do not fit in {device} memory "
        f"({first_line(exc, 120)}); use fewer"
    )
