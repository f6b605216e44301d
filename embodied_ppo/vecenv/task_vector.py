"""A task's own vector env, stepped in place of one env object per member (`env.batched`).

A registered task may offer a Gymnasium `vector_entry_point`: a vector env that steps many of
its envs together on arrays, each exactly as the task's single env steps it (the project's
quadruped tasks do; docs/environments.md). With `env.batched: true` (the default) the sync
backend steps that vector env instead of `env.num_envs` env objects: in this process, and in
each env process (`env.processes`) over that process's contiguous group of envs, with those
envs' seeds, so a run's trajectories do not depend on how its envs are grouped. Where the
config wraps its envs (`env.wrappers`), names a factory, or the id has no vector entry point,
the members are env objects as before.

What such a vector env must be (the contract, checked where it can be):

- a class that declares `metadata["member_exact"] = True`: env i steps exactly as the task's
  single env does with env i's seed (so a run's trajectories do not depend on the grouping).
  Vector entry points without it (Gymnasium's CartPole has one, drawing every env from one
  generator) are not used;
- made as `vector_entry_point(num_envs=n, max_episode_steps=limit, threads=t, **kwargs)`
  (the registration's kwargs under `env.kwargs`; `threads`: `env.threads`);
- SAME_STEP autoreset (`metadata["autoreset_mode"]`): where an episode ends, the step returns
  the next episode's first observation, with `info["final_obs"][i]` the ended one's last,
  `info["_final_obs"]` the mask, and `info["final_info"]` holding `log` and `is_success` as
  lists over the envs (None where an env reported none);
- `reset(seed=[one per env, None: unseeded])`;
- for exact resume, `state_dicts()` (each env's state, plain data) and
  `load_state_dicts(states)`; without them a resume starts fresh episodes and says so.

`TaskVectorGroup` gives such a vector env the interface of the serial vector env's group
(`serial.SerialVectorEnv`), which the backend and the env processes step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, create_empty_array

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import ConfigError
from embodied_ppo.core.obs import map_obs
from embodied_ppo.core.text import first_line
from embodied_ppo.vecenv.make import episode_limit, import_env_modules
from embodied_ppo.vecenv.serial import Ended, VectorStep, ended_info
from embodied_ppo.vecenv.spaces import Obs
from embodied_ppo.vecenv.state import EnvFailure

# How a member's state saved from a task's vector env is marked (a member saved from an env
# object holds `classes` and `layers` instead: see vecenv.state).
_MARK = "task_vector"


def vector_entry(cfg: EnvConfig) -> Callable[..., gym.vector.VectorEnv] | None:
    """The vector entry point the sync backend steps for `cfg`, or None: members are env
    objects (env.batched off, another backend, env.wrappers, a factory, or no entry point
    that declares itself member-exact)."""
    if not cfg.batched or cfg.backend != "sync" or cfg.wrappers or cfg.entry_point is not None:
        return None
    import_env_modules(cfg)
    spec = gym.registry.get(cfg.id.rpartition(":")[2]) if cfg.id else None
    entry = None if spec is None else spec.vector_entry_point
    if entry is None:
        return None
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    metadata = getattr(creator, "metadata", None)
    exact = isinstance(metadata, dict) and metadata.get("member_exact") is True
    return creator if exact else None


class TaskVectorGroup:
    """The envs `rows` of a run (a contiguous group) stepped by the task's vector env, with the
    interface of `SerialVectorEnv`: their observations, rewards and flags written into `out`
    (views of shared memory under env processes), ended episodes returned per step, and
    `call` / `set_attr` for the state capture of exact resume.

    Args:
        cfg: the env config (`vector_entry(cfg)` is not None).
        rows: the run's env indices this group steps (they name envs in errors).
        threads: `env.threads`, handed to the vector env.
        out: (obs, reward, term, trunc) arrays of leading size len(rows); by default its own.
    """

    def __init__(
        self,
        cfg: EnvConfig,
        rows: range,
        threads: int = 1,
        out: tuple[Obs, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        creator = vector_entry(cfg)
        if creator is None:
            raise ConfigError(f"env.id: {cfg.id} has no vector entry point to step")
        spec = gym.registry[cfg.id.rpartition(":")[2]]
        self.rows, self.num_envs = rows, len(rows)
        kwargs = {**spec.kwargs, **cfg.kwargs}
        self.env = creator(
            num_envs=len(rows), max_episode_steps=episode_limit(cfg), threads=threads, **kwargs
        )
        mode = self.env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            self.env.close()
            raise ConfigError(
                f"env.batched: {cfg.id}'s vector entry point resets ended episodes "
                f"{getattr(mode, 'value', mode)}, not in the step that ends them (SAME_STEP): "
                "add env.batched=false"
            )
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = self.env.metadata
        if out is None:
            obs = create_empty_array(self.single_observation_space, self.num_envs, fn=np.zeros)
            out = (
                dict(obs) if isinstance(obs, dict) else obs,
                np.zeros(self.num_envs, dtype=np.float64),
                np.zeros(self.num_envs, dtype=bool),
                np.zeros(self.num_envs, dtype=bool),
            )
        self._obs, self._reward, self._term, self._trunc = out
        self._pending: list[Any] | None = None
        self.closed = False

    def _failure(self, where: str, exc: Exception) -> EnvFailure:
        first, last = self.rows.start, self.rows.stop - 1
        which = f"environment {first}" if first == last else f"environments {first}-{last}"
        return EnvFailure(
            f"{which} ({type(self.env).__name__}) raised {type(exc).__name__} in {where}: "
            f"{first_line(exc)}"
        )

    def _write(self, obs: Obs) -> None:
        if isinstance(self._obs, dict):
            for key, value in obs.items():
                self._obs[key][...] = value
        else:
            self._obs[...] = obs

    def reset(self, seed: list[int] | None = None) -> tuple[Obs, dict]:
        """Reset every env (env i with seed[i], or unseeded); returns (obs copy, {})."""
        seeds = list(seed) if seed is not None else [None] * self.num_envs
        try:
            obs, _ = self.env.reset(seed=seeds)
        except Exception as exc:
            raise self._failure("reset", exc) from exc
        self._write(obs)
        return map_obs(np.copy, self._obs), {}

    def step_members(self, actions: np.ndarray) -> list[Ended]:
        """Step every env (into the output arrays); returns the episodes that ended, in order."""
        try:
            obs, reward, term, trunc, info = self.env.step(actions)
        except Exception as exc:
            raise self._failure("step", exc) from exc
        self._write(obs)
        self._reward[:], self._term[:], self._trunc[:] = reward, term, trunc
        if "_final_obs" not in info:
            return []
        final = info.get("final_info", {})
        logs, success = final.get("log"), final.get("is_success")
        ended: list[Ended] = []
        for i in np.flatnonzero(info["_final_obs"]).tolist():
            final_obs = info["final_obs"][i]
            ended.append((
                i,
                final_obs,
                None if success is None else success[i],
                None if logs is None else logs[i],
            ))  # fmt: skip
        return ended

    def step(self, actions: np.ndarray) -> VectorStep:
        """Step every env; the arrays returned are the group's own (overwritten next step)."""
        info = ended_info(self.step_members(actions), self.num_envs)
        return self._obs, self._reward, self._term, self._trunc, info

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The state capture of exact resume, per env (the only calls a group answers)."""
        if name == "embodied_ppo_get_state":
            if not callable(getattr(self.env, "state_dicts", None)):
                reason = f"{type(self.env).__name__} has no state_dicts()"
                return tuple({"reason": reason} for _ in range(self.num_envs))
            states = self.env.state_dicts()
            return tuple({"state": {_MARK: type(self.env).__qualname__, "env": s}} for s in states)
        if name == "embodied_ppo_apply_state":
            return self._apply()
        raise AttributeError(f"{type(self.env).__name__} (a task's vector env) has no {name!r}")

    def _apply(self) -> tuple[str | None, ...]:
        pending, self._pending = self._pending, None
        n = self.num_envs
        if pending is None:
            return ("no state was sent",) * n
        kind = type(self.env).__qualname__
        if not all(isinstance(s, dict) and s.get(_MARK) == kind for s in pending):
            why = f"saved from env objects or another vector env, not from {kind}"
            return (why,) * n
        if not callable(getattr(self.env, "load_state_dicts", None)):
            return (f"{kind} has no load_state_dicts()",) * n
        try:
            self.env.load_state_dicts([s["env"] for s in pending])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            return (f"{type(exc).__name__}: {exc}",) * n
        return (None,) * n

    def set_attr(self, name: str, values: object) -> None:
        """Hand each env its saved state (`embodied_ppo_pending_state`, one per env)."""
        if name != "embodied_ppo_pending_state":
            raise AttributeError(f"a task's vector env takes no attribute {name!r}")
        if not isinstance(values, list | tuple) or len(values) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} states, one per env")
        self._pending = list(values)

    def close(self, terminate: bool = False) -> None:
        """Close the vector env (`terminate` changes nothing here)."""
        if not self.closed:
            self.env.close()
            self.closed = True
