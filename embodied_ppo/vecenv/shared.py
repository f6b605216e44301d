"""Shared memory between this process and its env worker processes: the batch arrays every group writes, and the doorbells (step counters) that hand steps over without a pipe."""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext

import gymnasium as gym
import numpy as np

from embodied_ppo.core.system import usable_cores
from embodied_ppo.vecenv.spaces import Obs


class SharedArrays:
    """The batch arrays every group writes its rows of: observations, reward, flags.

    Allocated in shared memory before the workers start; `views(rows)` gives a group the
    numpy views of its rows.
    """

    def __init__(
        self,
        ctx: BaseContext,
        obs_space: gym.Space,
        num_envs: int,
        action: tuple[tuple[int, ...], np.dtype] | None = None,
    ) -> None:
        shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        observations = dict(obs_space.spaces) if isinstance(obs_space, gym.spaces.Dict) else None
        for prefix in ("obs", "final") if action is not None else ("obs",):
            if observations is not None:
                for k, space in observations.items():
                    shapes[f"{prefix}/{k}"] = ((num_envs, *space.shape), np.dtype(space.dtype))
            else:
                shapes[prefix] = ((num_envs, *obs_space.shape), np.dtype(obs_space.dtype))
        shapes["reward"] = ((num_envs,), np.dtype(np.float64))
        shapes["term"] = ((num_envs,), np.dtype(bool))
        shapes["trunc"] = ((num_envs,), np.dtype(bool))
        if action is not None:  # what doorbell steps exchange through shared memory
            shapes["action"] = ((num_envs, *action[0]), action[1])
            shapes["ended"] = ((num_envs,), np.dtype(bool))
            shapes["success"] = ((num_envs,), np.dtype(np.float64))  # NaN: not reported
        self.shapes = shapes
        self.raw = {
            name: ctx.RawArray(ctypes.c_uint8, max(1, int(np.prod(shape)) * dtype.itemsize))
            for name, (shape, dtype) in shapes.items()
        }
        self.dict_obs = isinstance(obs_space, gym.spaces.Dict)

    def arrays(self) -> dict[str, np.ndarray]:
        """Numpy views of the whole batch (call in the process that uses them)."""
        out = {}
        for name, (shape, dtype) in self.shapes.items():
            n = int(np.prod(shape))
            out[name] = np.frombuffer(self.raw[name], dtype=dtype, count=n).reshape(shape)
        return out

    def views(self, rows: range) -> tuple[Obs, np.ndarray, np.ndarray, np.ndarray]:
        """(obs, reward, term, trunc) of the rows `rows`, as views into the shared arrays."""
        a = self.arrays()
        part = slice(rows.start, rows.stop)
        return self.obs_view(a, "obs", part), a["reward"][part], a["term"][part], a["trunc"][part]

    def obs_view(self, arrays: dict[str, np.ndarray], prefix: str, rows: slice) -> Obs:
        """The observation arrays named `prefix` ("obs" or "final") of `rows`."""
        if self.dict_obs:
            start = prefix + "/"
            return {
                name[len(start) :]: v[rows] for name, v in arrays.items() if name.startswith(start)
            }
        return arrays[prefix][rows]


# Doorbell steps: a worker's control block (shared int64s) and how long each side spins.
# Steps asked, steps done, the last one failed (error on the pipe), the last one's episode logs
# are on the pipe.
CMD, DONE, FAILED, LOGS = 0, 1, 2, 3


SPIN_SECONDS = 0.005  # a worker, after each step: covers the policy's inference in between


WAIT_SPIN_SECONDS = 0.05  # this process, for a step's replies


POLL_SECONDS = 0.001  # past the spin: how often the counter is looked at again


def doorbell_action(space: gym.Space) -> tuple[tuple[int, ...], np.dtype] | None:
    """(shape, dtype) of one env's action in shared memory, as the vector env passes it: Box
    float32 (clipped there), Discrete int64; None for any other space (steps use pipes)."""
    if isinstance(space, gym.spaces.Box):
        return tuple(space.shape), np.dtype(np.float32)
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    return None


def can_spin(processes: int, threads: int) -> bool:
    """Whether doorbell steps may spin: x86-64 (ordered stores), and a core for every thread
    of every process (a spinning process must never take the core another one needs)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return usable_cores() >= processes * threads


def await_change(control: np.ndarray, index: int, old: int, spin: float, conn: Connection) -> bool:
    """Wait until control[index] != old: spin for `spin` seconds, then look every POLL_SECONDS
    while waiting on `conn`. Returns False as soon as `conn` has something to read instead (a
    pipe command, or EOF: the other side is gone)."""
    deadline = time.perf_counter() + spin
    while control[index] == old:
        if conn.poll(0.0 if time.perf_counter() < deadline else POLL_SECONDS):
            return control[index] != old
        _yield()  # a thread waiting for this core (another run's, say) goes first
    return True


def await_value(control: np.ndarray, index: int, value: int, alive: Callable[[], bool]) -> bool:
    """Spin until control[index] == value while `alive()` (a worker whose message is already on
    the pipe, ahead of its counter); False if it ended first."""
    while control[index] != value:
        if not alive():
            return bool(control[index] == value)
        _yield()
    return True


_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)
