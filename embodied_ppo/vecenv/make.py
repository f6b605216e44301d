"""One environment of an `env:` block: the registered id (with the project's own tasks and env.imports), env.kwargs, the time limit and env.wrappers."""

from __future__ import annotations

import importlib
import logging
import warnings

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.io.render import configure_headless_gl
from embodied_ppo.vecenv.factory import register_entry_point
from embodied_ppo.vecenv.mjlab_single import MjlabSingleEnv
from embodied_ppo.vecenv.spaces import SpaceInfo, describe_spaces
from embodied_ppo.vecenv.vector_factory import FirstEnv, make_vector, makes_vector


def episode_limit(cfg: EnvConfig) -> int | None:
    """The time limit episodes of this env config run under (None: no limit)."""
    if cfg.max_episode_steps is not None:
        return cfg.max_episode_steps
    if cfg.backend == "mjlab":
        return None  # mjlab tasks keep their limit in their own config (episode_length_s)
    return gym.spec(cfg.id).max_episode_steps


_MUJOCO_SEEN: set[str] = set()


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings, once each, through Python's logging / warnings instead of stderr.

    Gymnasium's bundled models trigger MuJoCo's deprecation notices (e.g. 'settotalmass') on
    every load: harmless, and not the user's to fix, so they go to the debug log. Anything else
    is shown once as a RuntimeWarning.
    """
    text = message.strip()
    if text in _MUJOCO_SEEN:
        return
    _MUJOCO_SEEN.add(text)
    if "deprecated" in text:
        logging.getLogger("embodied_ppo.mujoco").debug("%s", text)
    else:
        warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=2)


def _route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to `_mujoco_warning` (where MuJoCo is installed)."""
    try:
        # In the function: MuJoCo reads MUJOCO_GL when first imported, so it waits until an env
        # is made, after the command line or the API has chosen the headless backend.
        import mujoco
    except ImportError:
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


# The project's own tasks (envs/ in the repository); importing them registers their ids.
OWN_TASKS = "embodied_ppo_envs"


def import_env_modules(cfg: EnvConfig) -> None:
    """Import what registers the env ids: the project's own tasks and `env.imports`; then
    register env.id from `env.entry_point` where nothing registered it."""
    importlib.import_module(OWN_TASKS)
    for name in cfg.imports:
        importlib.import_module(name)
    register_entry_point(cfg)


def resolve_wrapper(name: str) -> type[gym.Wrapper]:
    """A Gymnasium wrapper by name (`FlattenObservation`) or your own (`module:Class`)."""
    if ":" in name:
        module, _, attr = name.partition(":")
        return getattr(importlib.import_module(module), attr)
    return getattr(gym.wrappers, name)


def make_one(cfg: EnvConfig, render_mode: str | None = None, wrap: bool = True) -> gym.Env:
    """One environment of `cfg`: gymnasium.make with env.kwargs and the time limit, then
    (with `wrap`) env.wrappers in order (`cfg` already validated: see validate.check_env); with
    backend mjlab, one env of the mjlab task as a Gymnasium env."""
    _route_mujoco_warnings()
    kwargs = dict(cfg.kwargs)
    if render_mode is not None or kwargs.get("render_mode") is not None:
        configure_headless_gl()  # before the env (or Gymnasium's renderer) makes a GL context
    if cfg.backend == "mjlab":
        return MjlabSingleEnv(cfg, render_mode)
    import_env_modules(cfg)
    if makes_vector(cfg):  # a factory's vector env: its env 0 (evaluation, checks)
        return FirstEnv(make_vector(cfg, render_mode))
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(cfg.id, **kwargs)
    for wrapper in cfg.wrappers if wrap else ():
        env = resolve_wrapper(wrapper.name)(env, **wrapper.kwargs)
    return env


def progress_formats(cfg: EnvConfig) -> dict[str, str]:
    """The episode metrics (info["log"] keys) the task names for the progress line, with the
    format of each: its class's `metadata["progress_metrics"]` (e.g. the quadruped's tracking
    errors and falls); none for a task that names none (or that is not a registered class)."""
    if cfg.backend == "mjlab":
        return {}
    import_env_modules(cfg)
    spec = gym.registry.get(cfg.id.rpartition(":")[2])
    entry = None if spec is None else spec.entry_point
    try:
        if isinstance(entry, str):
            entry = load_env_creator(entry)
    except (ImportError, AttributeError):
        return {}
    entry = getattr(entry, "factory", entry)  # a factory given to the API (OneEnv)
    metadata = getattr(entry, "metadata", None)
    shown = metadata.get("progress_metrics") if isinstance(metadata, dict) else None
    if not isinstance(shown, dict):
        return {}
    return {str(k): str(v) for k, v in shown.items()}


def declared_mirror(cfg: EnvConfig) -> tuple[object, SpaceInfo]:
    """What the env declares as its mirror (`metadata["mirror"]` of one env of `cfg`, its
    wrappers included: a wrapper that changes the observations declares its own; None where it
    declares none), and the spaces it declares it for."""
    env = make_one(cfg)
    try:
        metadata = getattr(env, "metadata", None)
        declared = metadata.get("mirror") if isinstance(metadata, dict) else None
        return declared, describe_spaces(env.observation_space, env.action_space)
    finally:
        env.close()
