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

Workers are never forked from this process: by the time envs are built it may run threads
(torch's, a compile pool's, a logger's), and a child forked from a process with threads holds
their locks in whatever state the fork found them (a worker was seen to abort so, with a
`std::system_error` before it had built its envs). They are forked instead from a forkserver,
a clean process that imported the env modules once (`worker_context`), and receive their env
factories by cloudpickle (`Portable`).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import signal
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from embodied_ppo.core.obs import map_obs
from embodied_ppo.vecenv.serial import Ended, SerialVectorEnv, VectorStep, ended_info, group_bounds
from embodied_ppo.vecenv.shared import (
    CMD,
    DONE,
    FAILED,
    LOGS,
    SPIN_SECONDS,
    WAIT_SPIN_SECONDS,
    SharedArrays,
    await_change,
    await_value,
    can_spin,
    doorbell_action,
)
from embodied_ppo.vecenv.spaces import Obs
from embodied_ppo.vecenv.worker_loop import Portable, serve

T = TypeVar("T")

# A command to a worker and its argument (None: the worker is sent nothing).
Message = tuple[str, object] | None


# What the forkserver imports once, so that each worker it forks starts with them: the main
# module (multiprocessing's default) and the modules a worker and the package's env factories use.
_PRELOAD = ["__main__", "embodied_ppo.vecenv.worker_loop", "embodied_ppo.vecenv.gym_backend"]


def worker_context(method: str | None = None) -> BaseContext:
    """The multiprocessing context env workers start with: `method`, else 'forkserver' where
    the platform has it (Linux, macOS), else 'spawn'. Never a plain fork by default (see the
    module's docstring). The forkserver, started on first use, preloads `_PRELOAD`."""
    if method is None:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)  # no effect once the server runs
    return ctx


class WorkerDied(RuntimeError):
    """A worker process ended while the vector env still needed it; the message names the
    envs it stepped, its pid and how it ended."""


class ProcessVectorEnv:
    """The members of a vector env stepped by `processes` processes, this one included
    (backend `sync` with `env.processes` > 1).

    The same subset of Gymnasium's vector-env interface as `SerialVectorEnv`, with the same
    per-member calls in the same order within each member, so trajectories are identical to
    the serial backend's. `threads` threads step each process's group (see SerialVectorEnv).

    Args:
        context: the multiprocessing start method of the workers (None: `worker_context`'s).
        doorbell: steps by doorbell (True) or by pipe (False); None: doorbells where they may
            spin (`can_spin`) and the action space has a fixed layout (Box, Discrete).
        worker_spin: how long a worker spins on its doorbell after each step before it polls.
        group: makes each process's group instead of a `SerialVectorEnv` of `env_fns`:
            group(rows, threads, out) (the task's own vector env, `task_vector`); `env_fns[0]`
            then only tells the spaces.
    """

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        processes: int,
        threads: int = 1,
        context: str | None = None,
        doorbell: bool | None = None,
        worker_spin: float = SPIN_SECONDS,
        *,
        group: Callable[..., Any] | None = None,
    ) -> None:
        self.num_envs = len(env_fns)
        self.groups = group_bounds(self.num_envs, processes)
        # The spaces, from a member built here: it is the first member of this process's group.
        ctx = worker_context(context)
        self.closed = False
        self.processes: list[BaseProcess] = []
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
                    target=serve,
                    args=(child, Portable([env_fns[i] for i in rows]), rows, threads, self._shared),
                    kwargs={
                        "control_raw": control,
                        "spin": worker_spin,
                        "group": None if group is None else Portable(group),
                    },
                    name=f"embodied-ppo-envs-{rows.start}-{rows.stop - 1}",
                    daemon=True,
                )
                process.start()
                child.close()
                self.processes.append(process)
                self._conns.append(parent)
            own = self.groups[0]
            if group is not None:
                first.close()  # it told the spaces
                self.local = group(own, threads, self._shared.views(own))
            else:
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

    def _send(self, messages: list[Message]) -> None:
        for w, (conn, message) in enumerate(zip(self._conns, messages)):
            if message is None:
                continue
            try:
                conn.send(message)
            except (BrokenPipeError, OSError) as exc:
                self.processes[w].join(timeout=5)
                raise WorkerDied(self._describe(w)) from exc

    def _gather(self, sent: Sequence[object]) -> list[object]:
        """Every worker's reply to the message it was sent (None: none sent); raises the first
        error after all replies are in, so no reply is left in a pipe."""
        results: list[object] = [None] * len(self._conns)
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

    def _all(
        self, command: str, per_group: Sequence[T], local: Callable[[T], object]
    ) -> list[object]:
        """Run `command` with each group's argument everywhere, this process's group meanwhile;
        returns the results in group order."""
        messages: list[Message] = [(command, arg) for arg in per_group[1:]]
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
        """Reset every member (member i with seed[i], or unseeded); returns (obs copy, {})."""
        seeds = seed if seed is not None else [None] * self.num_envs
        self._all("reset", [seeds[r.start : r.stop] for r in self.groups], self.local.reset)
        obs = self._obs
        return ({k: v.copy() for k, v in obs.items()} if isinstance(obs, dict) else obs.copy()), {}

    def step(self, actions: np.ndarray) -> VectorStep:
        """Step every member with its row of `actions`, each group in its process at once; the
        arrays returned are views of shared memory (overwritten by the next step)."""
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

    def _start_step(self, actions: np.ndarray, parts: list[np.ndarray]) -> list[Message]:
        """Hand every worker its actions (shared memory and a doorbell, or a message)."""
        if not self.doorbell or actions.dtype != self._actions.dtype:
            # (By message, any other dtype reaches the envs as it was given.)
            messages: list[Message] = [("step", part) for part in parts[1:]]
            self._send(messages)
            return messages
        rest = slice(self.groups[1].start, self.num_envs)
        self._actions[rest] = actions[rest]
        self._asked += 1
        for control in self._controls:
            control[CMD] = self._asked  # after the actions it hands over
        return []

    def _finish_step(self, sent: list[Message]) -> list[list[Ended]]:
        """Every worker's ended episodes of the step `_start_step` began; raises the first
        error once all workers are done, so that none is left mid-step."""
        if sent:
            return self._gather(sent)
        error: BaseException | None = None
        failed: list[Message] = [None] * len(self._conns)  # whose exception follows on the pipe
        results: list[list[Ended]] = []
        for w, (conn, control) in enumerate(zip(self._conns, self._controls, strict=True)):
            results.append([])
            done = await_change(control, DONE, self._asked - 1, WAIT_SPIN_SECONDS, conn)
            if not done and control[LOGS]:
                # The step's logs reached the pipe just before its counter rose.
                done = await_value(control, DONE, self._asked, self.processes[w].is_alive)
            if not done:
                # Its pipe has something instead of the step: it died (EOF).
                self.processes[w].join(timeout=5)
                error = error or WorkerDied(self._describe(w))
                continue
            if control[FAILED]:
                control[FAILED] = 0
                failed[w] = ("step", None)
                continue
            rows = self.groups[w + 1]
            logs: dict[int, object] = {}
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
        """Each member's attribute `name`, called with the arguments where it is callable, in
        member order."""
        per_group = [(name, args, kwargs)] * len(self.groups)
        results: list[Any] = []
        for group in self._all("call", per_group, lambda a: self.local.call(a[0], *a[1], **a[2])):
            results += list(group)
        return tuple(results)

    def set_attr(self, name: str, values: object) -> None:
        """Set attribute `name` of each member: values[i] of a list or tuple, else `values`."""
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


def _stop_workers(processes: list[BaseProcess], conns: list[Connection], timeout: float) -> None:
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
