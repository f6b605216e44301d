"""A factory that makes a whole Gymnasium vector env (env.entry_point, given to the Python API).

Training steps that vector env as it is (it must reset ended episodes in the step that ends
them, Gymnasium's SAME_STEP autoreset, and have env.num_envs envs); evaluation runs its env 0 as
one env (`FirstEnv`). Its envs' mid-episode state is not captured: a resume starts them on fresh
episodes, and says so.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.vecenv.factory import OneEnv, register_entry_point

# env.id -> whether its factory makes a vector env (found by making one, once a process).
_MAKES_VECTOR: dict[str, bool] = {}


def _factory(cfg: EnvConfig) -> object | None:
    """The callable registered for cfg.id from a factory, or None (a registered id)."""
    if cfg.entry_point is None or cfg.backend not in ("sync", "async"):
        return None
    register_entry_point(cfg)
    spec = gym.registry.get(cfg.id)
    entry = None if spec is None else spec.entry_point
    return entry.factory if isinstance(entry, OneEnv) else entry


def makes_vector(cfg: EnvConfig) -> bool:
    """Whether cfg's env comes from a factory that makes a vector env."""
    factory = _factory(cfg)
    if factory is None or isinstance(factory, str):
        return False
    if isinstance(factory, type):
        return issubclass(factory, gym.vector.VectorEnv)
    key = f"{cfg.id}\0{id(factory)}"  # the factory registered now, not an earlier one of the id
    if key not in _MAKES_VECTOR:
        made = factory(**cfg.kwargs)
        _MAKES_VECTOR[key] = isinstance(made, gym.vector.VectorEnv)
        made.close()
    return _MAKES_VECTOR[key]


def make_vector(cfg: EnvConfig, render_mode: str | None = None) -> gym.vector.VectorEnv:
    """The factory's vector env, checked: SAME_STEP autoreset, env.num_envs envs, stepped in
    this process, no env.wrappers (each a ConfigError of one line)."""
    for wrong, key, why in (
        (cfg.backend != "sync", "env.backend", f"got {cfg.backend!r}, expected sync"),
        (cfg.processes != 1, "env.processes", f"got {cfg.processes}, expected 1"),
        (bool(cfg.wrappers), "env.wrappers", "wrap the envs inside the factory instead"),
        (cfg.max_episode_steps is not None, "env.max_episode_steps", "set in the factory"),
    ):
        if wrong:
            raise ConfigError(
                f"{key}: {why}: {cfg.entry_point} makes a vector env, which steps its own envs"
            )
    factory = _factory(cfg)
    kwargs: dict[str, Any] = dict(cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = factory(**kwargs)  # type: ignore[misc]
    mode = env.metadata.get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        env.close()
        raise ConfigError(
            f"env.entry_point: {cfg.entry_point} makes a vector env with autoreset mode "
            f"{getattr(mode, 'value', mode)}; make it with autoreset_mode="
            "gymnasium.vector.AutoresetMode.SAME_STEP (an ended episode's final observation is "
            "what its value bootstraps from)"
        )
    if env.num_envs != cfg.num_envs:
        env.close()
        raise ConfigError(
            f"env.num_envs: got {cfg.num_envs}, but {cfg.entry_point} makes a vector env of "
            f"{env.num_envs}: set env.num_envs={env.num_envs}"
        )
    return env


def _first(value: Any) -> Any:
    """Env 0's part of a batched observation (an array, or a dict of them)."""
    if isinstance(value, dict):
        return {k: _first(v) for k, v in value.items()}
    return value[0]


def _first_info(info: dict[str, Any]) -> dict[str, Any]:
    """Env 0's part of a vector env's info (per key, values over envs and a `_key` mask)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get(f"_{key}")
        if mask is not None and not bool(np.asarray(mask)[0]):
            continue
        out[key] = _first_info(value) if isinstance(value, dict) else value[0]
    return out


class FirstEnv(gym.Env):
    """Env 0 of a vector env, as one env: evaluation's episodes. Every env of the vector takes
    env 0's action; a reset resets them all, env 0 with the given seed."""

    def __init__(self, vector: gym.vector.VectorEnv) -> None:
        self.vector = vector
        self.observation_space = vector.single_observation_space
        self.action_space = vector.single_action_space
        self.metadata = dict(vector.metadata)
        self.render_mode = vector.render_mode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env of the vector (env 0 with `seed`); env 0's observation and info."""
        obs, info = self.vector.reset(seed=seed, options=options)
        return _first(obs), _first_info(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step every env with `action`; env 0's step (its final observation at its end)."""
        actions = np.stack([np.asarray(action)] * self.vector.num_envs)
        obs, reward, terminated, truncated, info = self.vector.step(actions)
        if terminated[0] or truncated[0]:  # env 0's last step: its final observation and info
            final = info.get("final_info", {})
            return (
                _first(info["final_obs"]),
                float(reward[0]),
                bool(terminated[0]),
                bool(truncated[0]),
                _first_info(final) if final else {},
            )
        return _first(obs), float(reward[0]), False, False, _first_info(info)

    def render(self) -> Any:
        """Env 0's frame."""
        frames = self.vector.render()
        return frames[0] if isinstance(frames, (tuple, list)) else frames

    def close(self) -> None:
        """Close the vector env."""
        self.vector.close()
