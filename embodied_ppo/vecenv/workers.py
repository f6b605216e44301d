"""The members of a vector env split over several processes (`env.processes` > 1).

The members are split into contiguous groups, one per process. This process steps the first
group itself; each other group lives in a worker process. Every group is a `SerialVectorEnv`
(so the per-member calls, and the trajectories, are those of the serial backend) writing its
observations, rewards and flags straight into arrays in shared memory. Unlike Gymnasium's
`AsyncVectorEnv` (one process per env), a worker steps many envs per message, so tasks whose
step is mostly Python (HalfCheetah) run on several cores too.

How a step reaches a worker and comes back:

- **Doorbells** (where every process can have a core of its own, on x86-64): the actions are
  written into shared memory and a step counter in shared memory is raised; the worker, which
  spins on that counter for a while after each step (`SPIN_SECONDS`) before it falls back to
  polling its pipe every millisecond, steps its envs, writes the episodes that ended (final
  observations, `is_success`) into shared memory too, and raises its own counter, on which
  this process spins. A round trip costs a few microseconds instead of a pipe's ~70 (two
  wake-ups of a sleeping process); on 2 cores that took Humanoid's vector step of 8 envs from
  ~1.28 to ~1.03 ms.
  The counters are plain shared integers: x86-64 keeps each process's stores in order, which
  is what makes data written before a counter visible with it; elsewhere pipes are used.
- **Pipes** otherwise, and for every other command (reset, call, set_attr, close, and an
  error's exception): one small message each way per worker. A doorbell step whose ended
  episodes carry `info["log"]` dicts sends those on the pipe too, before its counter rises
  (episode ends are rare: the common step stays in shared memory).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import pickle
import platform
import signal
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from embodied_ppo.obs import map_obs
from embodied_ppo.obs import set_obs as obs_set
from embodied_ppo.vecenv.base import Obs
from embodied_ppo.vecenv.serial import Ended, SerialVectorEnv, ended_info, group_bounds


class WorkerDied(RuntimeError):
    """A worker process ended while the vector env still needed it; the message names the
    envs it stepped, its pid and how it ended."""


class SharedArrays:
    """The batch arrays every group writes its rows of: observations, reward, flags.

    Allocated in shared memory before the workers start; `views(rows)` gives a group the
    numpy views of its rows.
    """

    def __init__(
        self,
        ctx: Any,
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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) >= processes * threads


def _await_change(control: np.ndarray, index: int, old: int, spin: float, conn: Connection) -> bool:
    """Wait until control[index] != old: spin for `spin` seconds, then look every POLL_SECONDS
    while waiting on `conn`. Returns False as soon as `conn` has something to read instead (a
    pipe command, or EOF: the other side is gone)."""
    deadline = time.perf_counter() + spin
    while control[index] == old:
        if conn.poll(0.0 if time.perf_counter() < deadline else POLL_SECONDS):
            return control[index] != old
        _yield()  # a thread waiting for this core (another run's, say) goes first
    return True


_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)


def _picklable(exc: BaseException) -> BaseException:
    """`exc`, or a RuntimeError with its text when it cannot cross a pipe."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _worker(
    conn: Connection,
    env_fns: list[Callable[[], gym.Env]],
    rows: range,
    threads: int,
    shared: SharedArrays,
    control_raw: Any = None,
) -> None:
    """A worker process: build its group of members, then serve commands until 'close' or
    until the main process goes away (its pipe closes). With a control block (`control_raw`),
    steps come by doorbell and every other command by pipe."""
    # Stopping is the main process's decision: it finishes the iteration (stepping this
    # worker), saves, and closes it. Ctrl-C and SIGTERM reach the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        venv = SerialVectorEnv(env_fns, threads, out=shared.views(rows))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", _picklable(exc)))
        return
    offset = rows.start
    reply: tuple[str, Any] = ("ok", None)
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
        if control is not None and _await_change(control, CMD, done, SPIN_SECONDS, conn):
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
                    conn.send(("logs", logs))
                    control[LOGS] = 1
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
                result: Any = [(offset + i, o, s, log) for i, o, s, log in ended]
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


class ProcessVectorEnv:
    """The members of a vector env stepped by `processes` processes, this one included
    (backend `sync` with `env.processes` > 1).

    The same subset of Gymnasium's vector-env interface as `SerialVectorEnv`, with the same
    per-member calls in the same order within each member, so trajectories are identical to
    the serial backend's. `threads` threads step each process's group (see SerialVectorEnv).

    Args:
        doorbell: steps by doorbell (True) or by pipe (False); None: doorbells where they may
            spin (`can_spin`) and the action space has a fixed layout (Box, Discrete).
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        processes: int,
        threads: int = 1,
        context: str | None = None,
        doorbell: bool | None = None,
    ) -> None:
        self.num_envs = len(env_fns)
        self.groups = group_bounds(self.num_envs, processes)
        # The spaces, from a member built here: it is the first member of this process's group.
        ctx = mp.get_context(context)
        self.closed = False
        self.processes: list[Any] = []
        self._conns: list[Connection] = []
        # Workers ignore SIGTERM (see _worker), which is how multiprocessing ends daemon
        # processes at exit: so the workers are stopped here, before that, if the vector env
        # was never closed (and when it is).
        self._stop = weakref.finalize(self, _stop_workers, self.processes, self._conns, 1.0)
        first = env_fns[0]()
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.metadata = first.metadata
        self.observation_space = batch_space(first.observation_space, self.num_envs)
        self.action_space = batch_space(first.action_space, self.num_envs)
        action = doorbell_action(first.action_space)
        if doorbell is None:
            doorbell = can_spin(len(self.groups), threads)
        self.doorbell = bool(doorbell) and action is not None and len(self.groups) > 1
        self._shared = SharedArrays(
            ctx, first.observation_space, self.num_envs, action if self.doorbell else None
        )
        # Doorbells: one control block per worker (see CMD, DONE, FAILED); the steps asked.
        control_raw = [
            ctx.RawArray(ctypes.c_int64, 4) if self.doorbell else None for _ in self.groups[1:]
        ]
        self._controls = [np.frombuffer(raw, dtype=np.int64) for raw in control_raw if raw]
        self._asked = 0
        try:
            for rows, control in zip(self.groups[1:], control_raw, strict=True):
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=_worker,
                    args=(child, [env_fns[i] for i in rows], rows, threads, self._shared, control),
                    name=f"embodied-ppo-envs-{rows.start}-{rows.stop - 1}",
                    daemon=True,
                )
                process.start()
                child.close()
                self.processes.append(process)
                self._conns.append(parent)
            own = self.groups[0]
            members = [first] + [env_fns[i]() for i in own[1:]]
            self.local = SerialVectorEnv(
                [lambda env=env: env for env in members], threads, out=self._shared.views(own)
            )
            self._gather(["ready"] * len(self._conns))  # every worker built its members
        except BaseException:
            self.close(terminate=True)
            raise
        self._obs, self._reward, self._term, self._trunc = self._shared.views(
            range(0, self.num_envs)
        )
        if self.doorbell:
            arrays = self._shared.arrays()
            self._actions, self._ended = arrays["action"], arrays["ended"]
            self._success = arrays["success"]
            self._final = self._shared.obs_view(arrays, "final", slice(0, self.num_envs))

    # ------------------------------------------------------------------ messages
    def _describe(self, w: int) -> str:
        rows, process = self.groups[w + 1], self.processes[w]
        code = process.exitcode
        if code is None:
            how = "its pipe closed"
        elif code < 0 and -code in signal.valid_signals():
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exit code {code}"
        if len(rows) == 1:
            return f"environment {rows.start}: its worker process {process.pid} died ({how})"
        return (
            f"environments {rows.start}-{rows.stop - 1}: their worker process {process.pid} "
            f"died ({how})"
        )

    def _send(self, messages: list[tuple[str, Any] | None]) -> None:
        for w, (conn, message) in enumerate(zip(self._conns, messages)):
            if message is None:
                continue
            try:
                conn.send(message)
            except (BrokenPipeError, OSError) as exc:
                self.processes[w].join(timeout=5)
                raise WorkerDied(self._describe(w)) from exc

    def _gather(self, sent: list[Any]) -> list[Any]:
        """Every worker's reply to the message it was sent (None: none sent); raises the first
        error after all replies are in, so no reply is left in a pipe."""
        results: list[Any] = [None] * len(self._conns)
        error: BaseException | None = None
        for w, conn in enumerate(self._conns):
            if sent[w] is None:
                continue
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                self.processes[w].join(timeout=5)
                error = error or WorkerDied(self._describe(w))
                continue
            if status == "error":
                error = error or value
            else:
                results[w] = value
        if error is not None:
            raise error
        return results

    def _all(self, command: str, per_group: list[Any], local: Callable[[Any], Any]) -> list[Any]:
        """Run `command` with each group's argument everywhere, this process's group meanwhile;
        returns the results in group order."""
        messages: list[tuple[str, Any] | None] = [(command, arg) for arg in per_group[1:]]
        self._send(messages)
        local_error: BaseException | None = None
        mine = None
        try:
            mine = local(per_group[0])
        except BaseException as exc:  # the workers' replies are still collected
            local_error = exc
        others = self._gather(messages)
        if local_error is not None:
            raise local_error
        return [mine, *others]

    # ------------------------------------------------------------------ vector-env interface
    def reset(self, seed: list[int] | None = None) -> tuple[Obs, dict]:
        seeds = seed if seed is not None else [None] * self.num_envs
        self._all("reset", [seeds[r.start : r.stop] for r in self.groups], self.local.reset)
        obs = self._obs
        return ({k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()), {}

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        actions = np.asarray(actions)
        parts = [actions[r.start : r.stop] for r in self.groups]
        sent = self._start_step(actions, parts)
        local_error: BaseException | None = None
        ended: list[Ended] = []
        try:
            ended = self.local.step_members(parts[0])
        except BaseException as exc:  # the workers' steps are still collected
            local_error = exc
        others = self._finish_step(sent)
        if local_error is not None:
            raise local_error
        for group in others:
            ended += group
        info = ended_info(ended, self.num_envs)
        return self._obs, self._reward, self._term, self._trunc, info

    def _start_step(self, actions: np.ndarray, parts: list[np.ndarray]) -> list[Any]:
        """Hand every worker its actions (shared memory and a doorbell, or a message)."""
        if not self.doorbell or actions.dtype != self._actions.dtype:
            # (By message, any other dtype reaches the envs as it was given.)
            messages: list[tuple[str, Any] | None] = [("step", part) for part in parts[1:]]
            self._send(messages)
            return messages
        rest = slice(self.groups[1].start, self.num_envs)
        self._actions[rest] = actions[rest]
        self._asked += 1
        for control in self._controls:
            control[CMD] = self._asked  # after the actions it hands over
        return []

    def _finish_step(self, sent: list[Any]) -> list[list[Ended]]:
        """Every worker's ended episodes of the step `_start_step` began; raises the first
        error once all workers are done, so that none is left mid-step."""
        if sent:
            return self._gather(sent)
        error: BaseException | None = None
        failed: list[Any] = [None] * len(self._conns)  # whose exception follows on the pipe
        results: list[list[Ended]] = []
        for w, (conn, control) in enumerate(zip(self._conns, self._controls, strict=True)):
            results.append([])
            if not _await_change(control, DONE, self._asked - 1, WAIT_SPIN_SECONDS, conn):
                # Its pipe has something instead of the step: it died (EOF).
                self.processes[w].join(timeout=5)
                error = error or WorkerDied(self._describe(w))
                continue
            if control[FAILED]:
                control[FAILED] = 0
                failed[w] = ("step", None)
                continue
            rows = self.groups[w + 1]
            logs: dict[int, Any] = {}
            if control[LOGS]:
                control[LOGS] = 0
                try:
                    logs = {rows.start + i: log for i, log in conn.recv()[1]}
                except (EOFError, OSError):
                    self.processes[w].join(timeout=5)
                    error = error or WorkerDied(self._describe(w))
                    continue
            results[w] = [
                (
                    i,
                    map_obs(lambda a, i=i: a[i].copy(), self._final),
                    None if np.isnan(self._success[i]) else float(self._success[i]),
                    logs.get(i),
                )
                for i in np.flatnonzero(self._ended[rows.start : rows.stop]) + rows.start
            ]
        if any(failed):
            try:
                self._gather(failed)  # raises the first worker's exception
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
        return results

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        per_group = [(name, args, kwargs)] * len(self.groups)
        results: list[Any] = []
        for group in self._all("call", per_group, lambda a: self.local.call(a[0], *a[1], **a[2])):
            results += list(group)
        return tuple(results)

    def set_attr(self, name: str, values: list[Any] | Any) -> None:
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        per_group = [(name, list(values[r.start : r.stop])) for r in self.groups]
        self._all("set_attr", per_group, lambda a: self.local.set_attr(*a))

    def close(self, terminate: bool = False) -> None:
        """Close every member; `terminate`: kill the workers instead of asking them."""
        if self.closed:
            return
        self.closed = True
        if not terminate:
            with contextlib.suppress(Exception):
                self._all("close", [None] * len(self.groups), lambda _: None)
            for process in self.processes:
                process.join(timeout=10)
        self._stop()
        if hasattr(self, "local"):
            self.local.close()


def _stop_workers(processes: list[Any], conns: list[Connection], timeout: float) -> None:
    """Close the pipes (a worker that reads EOF ends), wait up to `timeout` seconds, then kill
    what is left (workers ignore SIGTERM)."""
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.close()
    for process in processes:
        process.join(timeout=timeout)
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(timeout=10)
