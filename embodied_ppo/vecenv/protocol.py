"""What every vector-env backend gives the collector: the protocols (`BatchedEnvs`, what every
kind has; `VecEnv`, the host kind) and one host step's result.

A vector env says which kind it is, typed: `on_device` is False for a `VecEnv` (numpy in and
out) and True for a `device_protocol.DeviceVecEnv` (tensors on the training device), so the
runner picks the collector by it and a type checker narrows the env with it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from embodied_ppo.core.types import CheckpointState
from embodied_ppo.vecenv.spaces import Obs, SpaceInfo


@dataclass
class StepResult:
    """One vector step, as numpy arrays of leading size N."""

    obs: Obs  # (N, ...), already reset where an episode ended
    reward: np.ndarray  # (N,) float32, raw
    terminated: np.ndarray  # (N,) bool
    truncated: np.ndarray  # (N,) bool
    final_obs: Obs  # (N, ...); rows valid where terminated | truncated
    episode_returns: list[float]  # raw returns of episodes that ended this step
    episode_lengths: list[int]
    episode_envs: list[int]  # the env index of each of those episodes
    # info["is_success"] at the last step of each of those episodes (None: not reported)
    episode_successes: list[float | None] | None = None
    # info["log"] at the last step of each of those episodes: the episode's own scalars (reward
    # terms, tracking errors, ...), a dict of floats; None where not reported
    episode_logs: list[dict[str, float] | None] | None = None


def step_result(
    obs: Obs,
    reward: np.ndarray,
    term: np.ndarray,
    trunc: np.ndarray,
    final_obs: Obs,
    *,
    ep_return: np.ndarray,
    ep_length: np.ndarray,
    success: np.ndarray | None = None,
    logs: Sequence[object] | None = None,
) -> StepResult:
    """A StepResult with the statistics of the episodes that ended; restarts their counters.

    `ep_return` / `ep_length` (N,) already include this step and are updated in place.
    `success` (N,): info["is_success"] of the ended episodes' last step, NaN where not reported.
    `logs` (N,): info["log"] of the ended episodes' last step as the envs reported it (None
    where not reported).
    """
    ended = np.flatnonzero(term | trunc)
    if not ended.size:  # the common step: no episode ended
        return StepResult(obs, reward, term, trunc, final_obs, [], [], [])
    rets, lens = ep_return[ended].tolist(), ep_length[ended].tolist()
    ep_return[ended] = 0.0
    ep_length[ended] = 0
    successes = None
    if success is not None:
        successes = [None if math.isnan(x) else float(x) for x in success[ended].tolist()]
    episode_logs = None
    if logs is not None:
        episode_logs = [episode_log(logs[i]) for i in ended.tolist()]
    return StepResult(
        obs, reward, term, trunc, final_obs, rets, lens, ended.tolist(), successes, episode_logs
    )


def episode_log(log: object) -> dict[str, float] | None:
    """An env's info["log"] as plain floats (None when absent or not a mapping)."""
    if not isinstance(log, dict):
        return None
    return {str(k): float(v) for k, v in log.items()}


class BatchedEnvs(Protocol):
    """What every vector env has, whichever kind: its size and spaces, which kind it is,
    state capture for exact resume, the step count and closing."""

    num_envs: int
    info: SpaceInfo

    @property
    def on_device(self) -> bool:
        """True for envs on the training device (`DeviceVecEnv`), False for host envs."""
        ...

    def get_state(self) -> CheckpointState:
        """Checkpoint-safe state: members mid-episode (or why not), episode statistics, steps."""
        ...

    def set_state(self, state: CheckpointState) -> str | None:
        """Restore `get_state()`; returns why the members could not be restored, or None."""
        ...

    def set_steps(self, steps: int) -> None:
        """The vector steps taken so far in the run (they number the steps in error messages)."""
        ...

    def close(self) -> None:
        """Close every env (and the processes or threads that step them)."""
        ...


class VecEnv(BatchedEnvs, Protocol):
    """A vector env on the host as the collector sees it: same-step autoreset (docs/design.md,
    rule 1), Box actions clipped to their bounds, finished-episode statistics, numpy arrays in
    and out."""

    @property
    def on_device(self) -> Literal[False]:
        """Always False: numpy arrays in and out."""
        ...

    def reset(self, seeds: list[int] | None = None) -> Obs:
        """Reset every env (default: the run's per-env seeds); returns observations (N, ...)."""
        ...

    def step(self, action: np.ndarray) -> StepResult:
        """Step with `action` (N, A) float or (N,) int."""
        ...

    def sample_actions(self) -> np.ndarray:
        """Uniform random actions for every env (benchmarks, smoke tests)."""
        ...
