"""The only module that touches Gymnasium vector environments.

`VecEnv` wraps a sync or async gymnasium vector env in SAME_STEP autoreset mode and hands the
collector plain numpy arrays: observations, rewards, terminated/truncated flags, the final
observation of every episode that ended this step, and finished-episode statistics (raw returns).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import difflib
import functools
import logging
import math
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from embodied_ppo.config import EnvConfig
from embodied_ppo.env_state import EnvFailure, TrackedEnv, from_checkpoint, to_checkpoint
from embodied_ppo.errors import ConfigError, TrainingError


@dataclass
class SpaceInfo:
    """What the policy needs to know about an environment's spaces."""

    obs_dim: int
    action_kind: str  # "gaussian" | "categorical"
    action_dim: int  # dimensions (Box) or number of actions (Discrete)
    action_low: list[float] | None
    action_high: list[float] | None


def env_seeds(seed: int, num_envs: int, offset: int = 0, generation: int = 0) -> list[int]:
    """Independent per-env seeds from the run seed and the global env index `offset + k`.

    `generation` gives a fresh, still deterministic, set of seeds (used when a run resumes).
    """
    return [
        int(
            np.random.SeedSequence(seed, spawn_key=(offset + k, generation)).generate_state(
                1, np.uint32
            )[0]
        )
        for k in range(num_envs)
    ]


def group_seeds(
    seed: int, num_envs: int, group_size: int, rollout: int, offset: int = 0
) -> list[int]:
    """Reset seeds for episodic collection: the `group_size` envs of a group share one seed.

    Every rollout gets fresh seeds, so groups start from new (but within a group, identical)
    states. Envs are numbered globally from `offset` (distributed runs).
    """
    return [
        int(
            np.random.SeedSequence(seed, spawn_key=(k // group_size, rollout, 1)).generate_state(
                1, np.uint32
            )[0]
        )
        for k in range(offset, offset + num_envs)
    ]


def noise_seed(seed: int, rollout: int) -> int:
    """Seed of the sampling noise of one rollout (shared by every process of a run)."""
    return int(np.random.SeedSequence(seed, spawn_key=(rollout, 2)).generate_state(1, np.uint32)[0])


def episode_limit(cfg: EnvConfig) -> int | None:
    """The time limit episodes of this env config run under (None: no limit)."""
    if cfg.max_episode_steps is not None:
        return cfg.max_episode_steps
    return gym.spec(cfg.id).max_episode_steps


def check_episodic(cfg: Any) -> None:
    """Critic-free estimators collect whole episodes: the time limit must fit in a rollout."""
    from embodied_ppo.config import CRITIC_FREE

    a = cfg.algorithm
    if a.adv_type not in CRITIC_FREE:
        return
    limit = episode_limit(cfg.env)
    if limit is None:
        raise ConfigError(
            f"env.max_episode_steps: {cfg.env.id} has no time limit; adv_type {a.adv_type!r} "
            "collects whole episodes, set env.max_episode_steps"
        )
    if a.rollout_steps < limit:
        raise ConfigError(
            f"algorithm.rollout_steps: got {a.rollout_steps}; adv_type {a.adv_type!r} collects one "
            f"whole episode per env, so it must be >= the episode limit {limit} (env.max_episode_steps)"
        )


def check_env_id(env_id: str) -> None:
    """Raise ConfigError for an id Gymnasium does not know, suggesting close matches."""
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"env.id: unknown environment {env_id!r}{hint}")


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
    try:
        import mujoco
    except ImportError:
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _make_one(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    _route_mujoco_warnings()
    kwargs = dict(cfg.kwargs)
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return gym.make(cfg.id, **kwargs)


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


def _make_member(cfg: EnvConfig, index: int, main_pid: int) -> gym.Env:
    """Vector-env member `index`: the env inside a TrackedEnv (failures name the index)."""
    if os.getpid() != main_pid:
        # An async worker. Ctrl-C and SIGTERM reach the whole process group, but stopping is the
        # main process's decision: it finishes the iteration (stepping these workers), saves,
        # and closes them. A worker whose parent dies ends when its pipe closes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return TrackedEnv(_make_one(cfg), index)


def make_env(cfg: EnvConfig, seed: int, env_offset: int = 0) -> VecEnv:
    """The training vector env for `cfg.backend`: a VecEnv, or envpool's adapter (same interface).

    `env_offset` is the global index of this process's first env (distributed runs).
    """
    if cfg.backend == "envpool":
        from embodied_ppo.envpool_backend import EnvPoolVecEnv

        return EnvPoolVecEnv(cfg, seed, env_offset)  # type: ignore[return-value]
    return VecEnv(cfg, seed, env_offset)


def space_info(cfg: EnvConfig) -> SpaceInfo:
    """Build one env to read its spaces; unsupported spaces are config errors."""
    if cfg.backend == "envpool":
        from embodied_ppo.envpool_backend import envpool_space_info

        return envpool_space_info(cfg)
    check_env_id(cfg.id)
    try:
        env = _make_one(cfg)
    except TypeError as exc:
        raise ConfigError(
            f"env.kwargs: {cfg.id} rejected the arguments {cfg.kwargs}: {exc}"
        ) from None
    try:
        return _space_info(env.observation_space, env.action_space, cfg.id)
    finally:
        env.close()


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
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]], threads: int = 1) -> None:
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, self.num_envs)
        self.action_space = batch_space(first.action_space, self.num_envs)
        self.metadata = first.metadata
        shape = (self.num_envs, *first.observation_space.shape)
        self._obs = np.zeros(shape, dtype=first.observation_space.dtype)
        self._reward = np.zeros(self.num_envs, dtype=np.float64)
        self._term = np.zeros(self.num_envs, dtype=bool)
        self._trunc = np.zeros(self.num_envs, dtype=bool)
        self.closed = False
        threads = max(1, min(threads, self.num_envs))
        bounds = np.linspace(0, self.num_envs, threads + 1).round().astype(int)
        self._groups = [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self._pool = ThreadPoolExecutor(threads - 1) if threads > 1 else None

    def reset(self, seed: list[int] | None = None) -> tuple[np.ndarray, dict]:
        seeds = seed if seed is not None else [None] * self.num_envs
        for i, env in enumerate(self.envs):
            self._obs[i], _ = env.reset(seed=seeds[i])
        return self._obs.copy(), {}

    def _step_group(self, members: range, actions: np.ndarray) -> list[tuple[int, Any]]:
        """Step members; returns (index, final observation) of those whose episode ended."""
        obs, reward, term, trunc = self._obs, self._reward, self._term, self._trunc
        ended = []
        envs = self.envs
        for i in members:
            env = envs[i]
            o, reward[i], te, tr, _ = env.step(actions[i])
            term[i], trunc[i] = te, tr
            if te or tr:
                ended.append((i, o))
                o, _ = env.reset()
            obs[i] = o
        return ended

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        if self._pool is None:
            ended = self._step_group(self._groups[0], actions)
        else:
            futures = [self._pool.submit(self._step_group, g, actions) for g in self._groups[1:]]
            ended = self._step_group(self._groups[0], actions)
            for future in futures:  # every group finishes before an error propagates
                concurrent.futures.wait([future])
            for future in futures:
                ended += future.result()
        info: dict[str, Any] = {}
        if ended:
            info = {"final_obs": [None] * self.num_envs}
            info["_final_obs"] = np.zeros(self.num_envs, dtype=bool)
            for i, o in ended:
                info["final_obs"][i], info["_final_obs"][i] = o, True
        return self._obs, self._reward, self._term, self._trunc, info

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        results = []
        for env in self.envs:
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(results)

    def set_attr(self, name: str, values: list[Any] | Any) -> None:
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self, terminate: bool = False) -> None:
        if not self.closed:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            for env in self.envs:
                env.close()
            self.closed = True


def _space_info(obs_space: gym.Space, act_space: gym.Space, env_id: str) -> SpaceInfo:
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ConfigError(
            f"env.id: {env_id} has observation space {obs_space}; only flat Box observations are supported"
        )
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
        return SpaceInfo(
            obs_space.shape[0], "gaussian", act_space.shape[0], low.tolist(), high.tolist()
        )
    if isinstance(act_space, gym.spaces.Discrete):
        if int(act_space.start) != 0:
            raise ConfigError(
                f"env.id: {env_id} has Discrete actions starting at {act_space.start}; only 0-based is supported"
            )
        return SpaceInfo(obs_space.shape[0], "categorical", int(act_space.n), None, None)
    raise ConfigError(
        f"env.id: {env_id} has action space {act_space}; supported: flat Box (Gaussian head) or Discrete (categorical head)"
    )


@dataclass
class StepResult:
    """One vector step, as numpy arrays of leading size N."""

    obs: np.ndarray  # (N, obs_dim) float32, already reset where an episode ended
    reward: np.ndarray  # (N,) float32, raw
    terminated: np.ndarray  # (N,) bool
    truncated: np.ndarray  # (N,) bool
    final_obs: np.ndarray  # (N, obs_dim) float32; rows valid where terminated | truncated
    episode_returns: list[float]  # raw returns of episodes that ended this step
    episode_lengths: list[int]
    episode_envs: list[int]  # the env index of each of those episodes


def step_result(
    obs: np.ndarray,
    reward: np.ndarray,
    term: np.ndarray,
    trunc: np.ndarray,
    final_obs: np.ndarray,
    ep_return: np.ndarray,
    ep_length: np.ndarray,
) -> StepResult:
    """A StepResult with the statistics of the episodes that ended; restarts their counters.

    `ep_return` / `ep_length` (N,) already include this step and are updated in place.
    """
    ended = np.flatnonzero(term | trunc)
    if not ended.size:  # the common step: no episode ended
        return StepResult(obs, reward, term, trunc, final_obs, [], [], [])
    rets, lens = ep_return[ended].tolist(), ep_length[ended].tolist()
    ep_return[ended] = 0.0
    ep_length[ended] = 0
    return StepResult(obs, reward, term, trunc, final_obs, rets, lens, ended.tolist())


class VecEnv:
    """A gymnasium vector env with SAME_STEP autoreset, action clipping and episode statistics."""

    def __init__(self, cfg: EnvConfig, seed: int, env_offset: int = 0) -> None:
        self.cfg = cfg
        self.num_envs = cfg.num_envs
        self.seeds = env_seeds(seed, cfg.num_envs, env_offset)
        fns = [functools.partial(_make_member, cfg, k, os.getpid()) for k in range(cfg.num_envs)]
        mode = {"autoreset_mode": AutoresetMode.SAME_STEP}
        if cfg.backend == "async":
            self.env: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(fns, **mode)
        else:
            self.env = SerialVectorEnv(fns, cfg.threads)  # type: ignore[assignment]
        self.info = _space_info(
            self.env.single_observation_space, self.env.single_action_space, cfg.id
        )
        if self.info.action_kind == "gaussian":
            self._low = np.asarray(self.info.action_low, dtype=np.float32)
            self._high = np.asarray(self.info.action_high, dtype=np.float32)
            self._clipped = np.zeros((self.num_envs, self.info.action_dim), dtype=np.float32)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.steps = 0  # vector steps taken in this run (restored on resume); for error messages
        self.env.action_space.seed(self.seeds[0])

    def reset(self, seeds: list[int] | None = None) -> np.ndarray:
        """Reset every env (with `seeds`, default: the per-env seeds of the run); returns obs (N, D)."""
        try:
            with _quiet_worker_errors():
                obs, _ = self.env.reset(seed=seeds if seeds is not None else self.seeds)
        except Exception as exc:
            raise self._failure(exc, "on reset") from exc
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._check_obs(np.asarray(obs, dtype=np.float32), "on reset")

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
        obs = self._check_obs(np.array(obs, dtype=np.float32), where)
        reward = np.array(reward, dtype=np.float32)
        term, trunc = np.array(term, dtype=bool), np.array(trunc, dtype=bool)
        ended = term | trunc
        final_obs = obs  # rows are only meaningful where an episode ended
        if ended.any():
            final_obs = obs.copy()
            mask = info.get("_final_obs", ended)
            for i in np.flatnonzero(mask):
                final_obs[i] = info["final_obs"][i]
            self._check_obs(final_obs, where)
        if not math.isfinite(reward.sum(dtype=np.float64)):
            bad = int(np.flatnonzero(~np.isfinite(reward))[0])
            raise TrainingError(
                f"environment {bad} returned a non-finite reward {reward[bad]} {where}"
            )
        self.steps += 1
        self._ep_return += reward
        self._ep_length += 1
        return step_result(obs, reward, term, trunc, final_obs, self._ep_return, self._ep_length)

    def sample_actions(self) -> np.ndarray:
        """Uniform random actions for every env (for benchmarks and smoke tests)."""
        return self.env.action_space.sample()

    @staticmethod
    def _check_obs(obs: np.ndarray, where: str) -> np.ndarray:
        # One float64 sum: NaN and Inf propagate, float32 values cannot overflow it.
        if not math.isfinite(obs.sum(dtype=np.float64)):
            bad = int(np.flatnonzero(~np.isfinite(obs).all(axis=-1))[0])
            raise TrainingError(f"environment {bad} returned a non-finite observation {where}")
        return obs

    def _failure(self, exc: Exception, where: str) -> TrainingError:
        """A TrainingError naming the env that failed (or the async worker that died)."""
        if isinstance(exc, EnvFailure):
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
        return TrainingError(f"environment step failed ({type(exc).__name__}: {exc}) {where}")

    # ------------------------------------------------------------------ exact resume
    def get_state(self) -> dict[str, Any]:
        """Checkpoint-safe state: every member's mid-episode state, episode statistics, steps.

        `members` is None when some env keeps state that cannot be captured (`not_captured`
        says which and why); resume then starts fresh episodes.
        """
        if self.env.closed:  # e.g. a checkpoint written after training ended
            replies = [{"reason": "closed"}] * self.num_envs
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

    def set_state(self, state: dict[str, Any]) -> str | None:
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

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:
            # A dead async worker breaks the polite shutdown; terminate the others instead.
            self.env.close(terminate=True)

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
