"""The Gymnasium backends: `sync` (a lean serial vector env, optionally threaded or split over
processes, or the task's own vector env: `task_vector`) and `async`.

`GymnasiumVecEnv` wraps either in SAME_STEP autoreset mode and hands the collector plain numpy
arrays: observations, rewards, terminated/truncated flags, the final observation of every episode
that ended this step, and finished-episode statistics (raw returns).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import warnings
from collections.abc import Iterator, Sequence
from typing import Final

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.obs import map_obs as obs_map
from embodied_ppo.core.obs import set_obs as obs_set
from embodied_ppo.core.system import usable_cores
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.io.render import gl_failure_hint
from embodied_ppo.vecenv.make import import_env_modules, make_one
from embodied_ppo.vecenv.protocol import StepResult, step_result
from embodied_ppo.vecenv.seeding import env_seeds
from embodied_ppo.vecenv.serial import SerialVectorEnv
from embodied_ppo.vecenv.spaces import Obs, describe_spaces, finite_rows, obs_cast
from embodied_ppo.vecenv.state import EnvFailure, TrackedEnv, from_checkpoint, to_checkpoint
from embodied_ppo.vecenv.task_vector import TaskVectorGroup, vector_entry
from embodied_ppo.vecenv.vector_factory import make_vector, makes_vector
from embodied_ppo.vecenv.workers import ProcessVectorEnv, WorkerDied, worker_context


def _member_logs(log: object, num_envs: int) -> Sequence[object]:
    """Each member's final info["log"]: a list from the serial and process backends, or
    Gymnasium's merged form from the async backend (per key, an array over members and a
    `_key` mask of the members that reported it)."""
    if isinstance(log, list):
        return log
    out: list[dict[str, object] | None] = [None] * num_envs
    if isinstance(log, dict):
        for key, values in log.items():
            if key.startswith("_"):
                continue
            reported = log.get(f"_{key}", np.ones(num_envs, dtype=bool))
            for i in np.flatnonzero(reported):
                out[i] = {} if out[i] is None else out[i]
                out[i][key] = values[i]
    return out


class _Where:
    """Where a step happened, formatted only when an error message needs it."""

    __slots__ = ("step", "num_envs")

    def __init__(self, step: int, num_envs: int) -> None:
        self.step, self.num_envs = step, num_envs

    def __str__(self) -> str:
        return f"at step {self.step} (global step {self.step * self.num_envs:,})"

    def __format__(self, spec: str) -> str:
        return str(self)


@contextlib.contextmanager
def _quiet_worker_errors() -> Iterator[None]:
    """Hide the async backend's warnings that repeat a failed worker's traceback.

    The error itself is raised again here, and TrackedEnv's message already names the env, the
    exception and the line that raised it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r".*ERROR: (Received the following error from Worker|Traceback|Raising the last)",
        )
        yield


def env_threads(cfg: EnvConfig) -> int:
    """The threads stepping each env process's envs: `env.threads`, or where it is null the
    usable cores shared among the env processes and the torchrun processes of this host."""
    if cfg.threads is not None:
        return cfg.threads
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, usable_cores() // (local * cfg.processes))


def _make_member(
    cfg: EnvConfig, index: int, main_pid: int, spec: gym.envs.registration.EnvSpec | None = None
) -> gym.Env:
    """Vector-env member `index`: the env inside a TrackedEnv (failures name the index).

    `spec`: the main process's registration of `cfg.id`, for a worker process where the id is
    not registered (registered at run time in the main process, not by an `env.imports` module).
    """
    if os.getpid() != main_pid:
        # An async worker. Ctrl-C and SIGTERM reach the whole process group, but stopping is the
        # main process's decision: it finishes the iteration (stepping these workers), saves,
        # and closes them. A worker whose parent dies ends when its pipe closes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if spec is not None and cfg.id not in gym.registry:
            gym.registry[cfg.id] = spec  # before env.entry_point, which the main's spec made
        import_env_modules(cfg)
    return TrackedEnv(make_one(cfg), index)


class GymnasiumVecEnv:
    """A gymnasium vector env with SAME_STEP autoreset, action clipping and episode statistics
    (the `VecEnv` protocol of `vecenv.protocol`)."""

    on_device: Final = False  # a host env (vecenv.protocol.VecEnv)

    def __init__(self, cfg: EnvConfig, seed: int, env_offset: int = 0) -> None:
        self.cfg = cfg
        self.num_envs = cfg.num_envs
        self.seeds = env_seeds(seed, cfg.num_envs, env_offset)
        spec = None
        if cfg.backend == "async" or cfg.processes > 1:  # members built in worker processes
            import_env_modules(cfg)
            spec = gym.registry.get(cfg.id)
        fns = [
            functools.partial(_make_member, cfg, k, os.getpid(), spec) for k in range(cfg.num_envs)
        ]
        mode = {"autoreset_mode": AutoresetMode.SAME_STEP}
        # A vector env a factory makes whole is stepped as it is; its members are not ours.
        self.members_ours = not makes_vector(cfg)
        if not self.members_ours:
            self.env = make_vector(cfg)
        elif cfg.backend == "async":
            self.env: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(
                fns, context=worker_context().get_start_method(), **mode
            )
        elif cfg.processes > 1:
            # Each process's group of envs: the task's own vector env where it has one.
            group = functools.partial(TaskVectorGroup, cfg) if vector_entry(cfg) else None
            self.env = ProcessVectorEnv(  # type: ignore[assignment]
                fns, cfg.processes, env_threads(cfg), group=group
            )
        elif vector_entry(cfg) is not None:
            self.env = TaskVectorGroup(cfg, range(cfg.num_envs), env_threads(cfg))  # type: ignore[assignment]
        else:
            self.env = SerialVectorEnv(fns, env_threads(cfg))  # type: ignore[assignment]
        self.info = describe_spaces(self.env.single_observation_space, self.env.single_action_space)
        if self.info.action_kind == "gaussian":
            self._low = np.asarray(self.info.action_low, dtype=np.float32)
            self._high = np.asarray(self.info.action_high, dtype=np.float32)
            self._clipped = np.zeros((self.num_envs, self.info.action_dim), dtype=np.float32)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.steps = 0  # vector steps taken in this run (restored on resume); for error messages
        self.env.action_space.seed(self.seeds[0])

    def reset(self, seeds: list[int] | None = None) -> Obs:
        """Reset every env (with `seeds`, default: the per-env seeds of the run); returns obs."""
        try:
            with _quiet_worker_errors():
                obs, _ = self.env.reset(seed=seeds if seeds is not None else self.seeds)
        except Exception as exc:
            raise self._failure(exc, "on reset") from exc
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._check_obs(obs_cast(obs, self.info), "on reset")

    def step(self, action: np.ndarray) -> StepResult:
        """Step with `action` (N, A) float or (N,) int; Box actions are clipped to the bounds here."""
        if self.info.action_kind == "gaussian":
            clipped = self._clipped
            np.minimum(action, self._high, out=clipped)
            action = np.maximum(clipped, self._low, out=clipped)
        where = _Where(self.steps + 1, self.num_envs)
        try:
            if self.cfg.backend == "async":
                with _quiet_worker_errors():
                    obs, reward, term, trunc, info = self.env.step(action)
            else:
                obs, reward, term, trunc, info = self.env.step(action)
        except Exception as exc:  # an env or a worker process failed
            raise self._failure(exc, where) from exc
        # Copies: the vector env reuses its arrays.
        obs = self._check_obs(obs_cast(obs, self.info), where)
        reward = np.array(reward, dtype=np.float32)
        term, trunc = np.array(term, dtype=bool), np.array(trunc, dtype=bool)
        ended = term | trunc
        final_obs = obs  # rows are only meaningful where an episode ended
        success = logs = None
        if ended.any():
            final_obs = obs_map(np.copy, obs)
            mask = info.get("_final_obs", ended)
            for i in np.flatnonzero(mask):
                obs_set(final_obs, i, info["final_obs"][i])
            self._check_obs(final_obs, where)
            final_info = info.get("final_info", {})
            if "is_success" in final_info:
                success = np.where(final_info["_is_success"], final_info["is_success"], np.nan)
            if "log" in final_info:
                logs = _member_logs(final_info["log"], self.num_envs)
        if not math.isfinite(reward.sum(dtype=np.float64)):
            bad = int(np.flatnonzero(~np.isfinite(reward))[0])
            raise TrainingError(
                f"environment {bad} returned a non-finite reward {reward[bad]} {where}"
            )
        self.steps += 1
        self._ep_return += reward
        self._ep_length += 1
        return step_result(
            obs,
            reward,
            term,
            trunc,
            final_obs,
            ep_return=self._ep_return,
            ep_length=self._ep_length,
            success=success,
            logs=logs,
        )

    def sample_actions(self) -> np.ndarray:
        """Uniform random actions for every env (for benchmarks and smoke tests)."""
        return self.env.action_space.sample()

    @staticmethod
    def _check_obs(obs: Obs, where: _Where | str) -> Obs:
        # The common case first, in one float64 sum: NaN and Inf propagate through it.
        if not isinstance(obs, dict) and math.isfinite(obs.sum(dtype=np.float64)):
            return obs
        bad = finite_rows(obs)
        if bad is not None:
            raise TrainingError(
                f"environment {int(bad[0])} returned a non-finite observation {where}"
            )
        return obs

    def _failure(self, exc: Exception, where: _Where | str) -> TrainingError:
        """A TrainingError naming the env that failed (or the async worker that died)."""
        if isinstance(exc, EnvFailure | WorkerDied):
            return TrainingError(f"{exc} {where}")
        for i, process in enumerate(getattr(self.env, "processes", [])):
            if not process.is_alive():
                code = process.exitcode
                how = (
                    f"killed by {signal.Signals(-code).name}"
                    if code is not None and code < 0 and -code in signal.valid_signals()
                    else f"exit code {code}"
                )
                return TrainingError(
                    f"environment {i}: its worker process {process.pid} died ({how}) {where}"
                )
        hint = gl_failure_hint(exc)
        return TrainingError(
            f"environment step failed ({type(exc).__name__}: {first_line(exc)}) {where}"
            + (f"; {hint}" if hint else "")
        )

    # ------------------------------------------------------------------ exact resume
    def get_state(self) -> CheckpointState:
        """Checkpoint-safe state: every member's mid-episode state, episode statistics, steps.

        `members` is None when some env keeps state that cannot be captured (`not_captured`
        says which and why); resume then starts fresh episodes.
        """
        if self.env.closed:  # e.g. a checkpoint written after training ended
            replies = [{"reason": "closed"}] * self.num_envs
        elif not self.members_ours:
            reason = f"a vector env of {self.cfg.entry_point}, whose envs' state is not captured"
            replies = [{"reason": reason}] * self.num_envs
        else:
            try:
                replies = self.env.call("embodied_ppo_get_state")
            except Exception as exc:
                raise self._failure(exc, "while saving its state") from exc
        reasons = [
            f"environment {i}: {r['reason']}" for i, r in enumerate(replies) if "reason" in r
        ]
        return {
            "members": None if reasons else to_checkpoint([r["state"] for r in replies]),
            "not_captured": reasons[0] if reasons else None,
            "ep_return": torch.from_numpy(self._ep_return.copy()),
            "ep_length": torch.from_numpy(self._ep_length.copy()),
            "steps": self.steps,
        }

    def set_state(self, state: CheckpointState) -> str | None:
        """Restore `get_state()`; returns why the members could not be restored, or None.

        On a non-None return the members may be partly restored: reset them before use.
        """
        self.steps = int(state["steps"])
        if state["members"] is None:
            return state["not_captured"]
        members = from_checkpoint(state["members"])
        if len(members) != self.num_envs:
            return f"saved {len(members)} environments, this run has {self.num_envs}"
        try:
            # set_attr hands each member its own state (call would send all of them to every worker).
            self.env.set_attr("embodied_ppo_pending_state", members)
            errors = self.env.call("embodied_ppo_apply_state")
        except Exception as exc:
            raise self._failure(exc, "while restoring its state") from exc
        for i, error in enumerate(errors):
            if error is not None:
                return f"environment {i}: {error}"
        self._ep_return[:] = state["ep_return"].numpy()
        self._ep_length[:] = state["ep_length"].numpy()
        return None

    def set_steps(self, steps: int) -> None:
        """The vector steps taken so far in the run (they number the steps in error messages)."""
        self.steps = steps

    def close(self) -> None:
        """Close every env; a vector env whose worker died is terminated instead."""
        try:
            self.env.close()
        except Exception:
            # A dead async worker breaks the polite shutdown; terminate the others instead.
            self.env.close(terminate=True)

    def __enter__(self) -> GymnasiumVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
