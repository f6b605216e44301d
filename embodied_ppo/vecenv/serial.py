"""The serial vector env: members stepped in this process, optionally on several threads.

It is the `sync` backend's vector env, and the group of members each process steps when the
envs are split over processes (`vecenv.workers`).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array

from embodied_ppo.core.obs import map_obs as obs_map
from embodied_ppo.core.obs import set_obs as obs_set
from embodied_ppo.vecenv.spaces import Obs

# An ended episode of a vector step: (member index, final observation, final is_success or None,
# final info["log"] or None); the last two as the env reported them, whatever their type.
Ended = tuple[int, Obs, Any, Any]

# What a vector step returns, as Gymnasium's vector envs do: (obs, reward, terminated, truncated,
# info), the arrays of leading size N; the info dict holds per key what Gymnasium puts there.
VectorStep = tuple[Obs, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


def group_bounds(num_envs: int, groups: int) -> list[range]:
    """`groups` contiguous, near-equal ranges of member indices (at most one per member)."""
    groups = max(1, min(groups, num_envs))
    bounds = np.linspace(0, num_envs, groups + 1).round().astype(int)
    return [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def ended_info(ended: list[Ended], num_envs: int) -> dict[str, Any]:
    """The info dict of a vector step as Gymnasium's vector envs report it (only what the
    collector reads): `final_obs` of the members whose episode ended, their last `is_success`
    and their last `log` (the episode's own scalars) where they reported one."""
    if not ended:
        return {}
    info: dict[str, Any] = {"final_obs": [None] * num_envs}
    info["_final_obs"] = np.zeros(num_envs, dtype=bool)
    success = np.zeros(num_envs)
    reported = np.zeros(num_envs, dtype=bool)
    logs: list[Any] = [None] * num_envs
    for i, o, is_success, log in ended:
        info["final_obs"][i], info["_final_obs"][i] = o, True
        if is_success is not None:
            success[i], reported[i] = float(is_success), True
        logs[i] = log
    final_info: dict[str, Any] = {}
    if reported.any():
        final_info.update(is_success=success, _is_success=reported)
    if any(log is not None for log in logs):
        final_info["log"] = logs
    if final_info:
        info["final_info"] = final_info
    return info


class SerialVectorEnv:
    """The members of a vector env stepped in this process (backend `sync`).

    The subset of Gymnasium's vector-env interface VecEnv uses, with SAME_STEP autoreset: an
    ended member is reset within the step, its last observation reported as `final_obs`. It
    writes into preallocated arrays and skips Gymnasium's merging of the members' info dicts,
    which costs more than a MuJoCo step for small tasks; the per-member calls (step, reset
    without a seed after an episode end, reset with the given seeds) are those of
    `gym.vector.SyncVectorEnv`, so trajectories are identical.

    With `threads` > 1 the members are split into that many contiguous groups stepped by a
    thread pool (the calling thread takes the first group). MuJoCo releases the GIL while it
    simulates, so physics-heavy tasks step on several cores; members never share state, so the
    trajectories are the same as with one thread.

    Args:
        out: (obs, reward, term, trunc) arrays of leading size N to write the steps into (e.g.
            views of shared memory); by default the vector env allocates its own.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        threads: int = 1,
        out: tuple[Obs, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, self.num_envs)
        self.action_space = batch_space(first.action_space, self.num_envs)
        self.metadata = first.metadata
        if out is None:
            obs = create_empty_array(first.observation_space, self.num_envs, fn=np.zeros)
            out = (
                dict(obs) if isinstance(obs, dict) else obs,
                np.zeros(self.num_envs, dtype=np.float64),
                np.zeros(self.num_envs, dtype=bool),
                np.zeros(self.num_envs, dtype=bool),
            )
        self._obs, self._reward, self._term, self._trunc = out
        self.closed = False
        self._groups = group_bounds(self.num_envs, threads)
        self._pool = ThreadPoolExecutor(len(self._groups) - 1) if len(self._groups) > 1 else None

    def reset(self, seed: list[int] | None = None) -> tuple[Obs, dict]:
        """Reset every member (member i with seed[i], or unseeded); returns (obs copy, {})."""
        seeds = seed if seed is not None else [None] * self.num_envs
        for i, env in enumerate(self.envs):
            obs_set(self._obs, i, env.reset(seed=seeds[i])[0])
        return obs_map(np.copy, self._obs), {}

    def _step_group(self, members: range, actions: np.ndarray) -> list[Ended]:
        """Step members; returns the episodes that ended."""
        obs, reward, term, trunc = self._obs, self._reward, self._term, self._trunc
        dict_obs = isinstance(obs, dict)
        ended = []
        envs = self.envs
        for i in members:
            env = envs[i]
            o, reward[i], te, tr, info = env.step(actions[i])
            term[i], trunc[i] = te, tr
            if te or tr:
                ended.append((i, o, info.get("is_success"), info.get("log")))
                o, _ = env.reset()
            if dict_obs:
                obs_set(obs, i, o)
            else:
                obs[i] = o
        return ended

    def step_members(self, actions: np.ndarray) -> list[Ended]:
        """Step every member (observations, rewards and flags into the output arrays); returns
        the episodes that ended, in member order."""
        if self._pool is None:
            return self._step_group(self._groups[0], actions)
        futures = [self._pool.submit(self._step_group, g, actions) for g in self._groups[1:]]
        ended = self._step_group(self._groups[0], actions)
        for future in futures:  # every group finishes before an error propagates
            concurrent.futures.wait([future])
        for future in futures:
            ended += future.result()
        return ended

    def step(self, actions: np.ndarray) -> VectorStep:
        """Step every member with its row of `actions`; the arrays returned are the vector env's
        own (overwritten by the next step)."""
        info = ended_info(self.step_members(actions), self.num_envs)
        return self._obs, self._reward, self._term, self._trunc, info

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each member's attribute `name`, called with the arguments where it is callable."""
        results = []
        for env in self.envs:
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(results)

    def set_attr(self, name: str, values: object) -> None:
        """Set attribute `name` of each member: values[i] of a list or tuple, else `values`."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self, terminate: bool = False) -> None:
        """Close every member and the thread pool (`terminate` changes nothing here)."""
        if not self.closed:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            for env in self.envs:
                env.close()
            self.closed = True
