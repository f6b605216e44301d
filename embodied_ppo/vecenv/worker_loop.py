"""What an env worker process runs (`env.processes` > 1): its group of members, stepped on
command, by doorbell or by pipe (see `env.workers`, the main process's side)."""

from __future__ import annotations

import contextlib
import ctypes
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

import cloudpickle
import gymnasium as gym
import numpy as np

from embodied_ppo.core.obs import set_obs as obs_set
from embodied_ppo.vecenv.serial import SerialVectorEnv
from embodied_ppo.vecenv.shared import (
    CMD,
    DONE,
    FAILED,
    LOGS,
    SPIN_SECONDS,
    SharedArrays,
    await_change,
)

T = TypeVar("T")


class Portable(Generic[T]):
    """A value that crosses to a worker process by cloudpickle, so that lambdas and closures
    (an env factory written inline) reach workers that were not forked from this process."""

    def __init__(self, value: T) -> None:
        self.value = value

    def __getstate__(self) -> bytes:
        return cloudpickle.dumps(self.value)

    def __setstate__(self, data: bytes) -> None:
        self.value = pickle.loads(data)


def _picklable(exc: BaseException) -> BaseException:
    """`exc`, or a RuntimeError with its text when it cannot cross a pipe."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def serve(
    conn: Connection,
    env_fns: Portable[list[Callable[[], gym.Env]]],
    rows: range,
    threads: int,
    shared: SharedArrays,
    *,
    control_raw: ctypes.Array | None = None,
    spin: float = SPIN_SECONDS,
    group: Portable[Callable[..., Any]] | None = None,
) -> None:
    """A worker process's life: build its group of members, then serve commands until
    'close' or until the main process goes away (its pipe closes). With a control block
    (`control_raw`), steps come by doorbell (the worker spins `spin` seconds after each before
    it polls) and every other command by pipe. With `group`, the members are the group it
    makes, group(rows, threads, out) (a task's own vector env), instead of `env_fns`'."""
    # Stopping is the main process's decision: it finishes the iteration (stepping this
    # worker), saves, and closes it. Ctrl-C and SIGTERM reach the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        if group is not None:
            venv = group.value(rows, threads, shared.views(rows))
        else:
            venv = SerialVectorEnv(env_fns.value, threads, out=shared.views(rows))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", _picklable(exc)))
        return
    offset = rows.start
    reply: tuple[str, object] | None = ("ok", None)
    control = None if control_raw is None else np.frombuffer(control_raw, dtype=np.int64)
    if control is not None:
        arrays = shared.arrays()
        part = slice(rows.start, rows.stop)
        actions, ended_rows = arrays["action"][part], arrays["ended"][part]
        success, final = arrays["success"][part], shared.obs_view(arrays, "final", part)
        done = int(control[DONE])
    while True:
        if reply is not None:
            try:
                conn.send(reply)
            except (EOFError, OSError):  # the main process is gone
                break
        reply = None
        if control is not None and await_change(control, CMD, done, spin, conn):
            try:
                ended_rows[:] = False
                logs = []
                for i, o, s, log in venv.step_members(actions):
                    ended_rows[i] = True
                    success[i] = np.nan if s is None else float(s)
                    obs_set(final, i, o)
                    if log is not None:
                        logs.append((i, log))
                if logs:  # on the pipe before the counter rises: there when it is read
                    # The flag first: the main process, seeing the pipe readable before the
                    # counter rises, tells these logs from a closed pipe by it.
                    control[LOGS] = 1
                    conn.send(("logs", logs))
            except BaseException as exc:
                control[FAILED] = 1
                reply = ("error", _picklable(exc))
            done += 1
            control[DONE] = done  # after everything it publishes
            continue
        try:
            command, data = conn.recv()
        except (EOFError, OSError):  # the main process is gone
            break
        try:
            if command == "step":
                # Indices of the ended episodes are the run's, not the group's.
                ended = venv.step_members(data)
                result: object = [(offset + i, o, s, log) for i, o, s, log in ended]
            elif command == "reset":
                venv.reset(seed=data)
                result = None
            elif command == "call":
                result = venv.call(data[0], *data[1], **data[2])
            elif command == "set_attr":
                venv.set_attr(*data)
                result = None
            elif command == "close":
                venv.close()
                with contextlib.suppress(OSError):
                    conn.send(("ok", None))
                break
            else:
                raise ValueError(f"unknown command {command!r}")
            reply = ("ok", result)
        except BaseException as exc:
            reply = ("error", _picklable(exc))
    with contextlib.suppress(Exception):
        venv.close()
    conn.close()
