"""The `env.backend: envpool` vector env: envpool's C++ thread pool behind VecEnv's interface.

envpool steps every env in C++ threads and hands back whole batches, but its conventions differ
from the gymnasium backend's in four ways, and this adapter evens them out so the collector sees
exactly what `VecEnv` gives it (docs/design.md, rule 1):

* Autoreset. envpool resets an env that ended on its *next* step (NEXT_STEP: that step ignores
  the action and returns the reset observation with reward 0). Here, on the step where episodes
  end, the ended envs are reset at once through envpool's `reset(env_ids)`, so a step returns the
  reset observation as `obs` and the observation the episode ended with as `final_obs`
  (SAME_STEP), and every envpool step is a real transition.
* Time limit. envpool reports an episode that terminates on the last step of its time limit as
  truncated and *not* terminated, which would bootstrap a terminal state with V(final_obs). The
  adapter therefore turns envpool's own limit off and applies the Gymnasium limit itself, like
  gymnasium's TimeLimit: `truncated` when the limit is reached, `terminated` from the task alone
  (both may be set).
* Seeding. envpool seeds each env once, when the pool is built (`seed=[...]`, one int32 per env),
  and later resets draw from that env's generator, just as gymnasium continues an env's generator
  after `reset(seed=...)`. `reset(seeds)` therefore builds a fresh pool with those seeds (a few
  milliseconds), so every env starts from its own seed as with the gymnasium backend. The numbers
  differ from gymnasium's (other generator, other initial-state draws), so a seed gives the same
  run on this backend every time, not the gymnasium backend's run.
* Exact resume. The C++ envs' mid-episode state cannot be captured: a resumed run starts fresh
  episodes (the trainer says so in its resume note).

Tasks must be provided by both envpool and Gymnasium, with the same spaces: evaluation, videos and
`embodied-ppo eval` run the Gymnasium version, and `env.kwargs` go to both.
"""

from __future__ import annotations

import warnings
from typing import Any, Final

import gymnasium as gym
import numpy as np
import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.vecenv.envpool_plan import _NO_LIMIT, _import_envpool, default_threads, plan
from embodied_ppo.vecenv.protocol import StepResult, step_result
from embodied_ppo.vecenv.seeding import env_seeds
from embodied_ppo.vecenv.spaces import SpaceInfo


def _int32_seeds(seeds: list[int]) -> list[int]:
    """envpool takes int32 seeds: read each uint32 seed's bits as int32 (distinct stay distinct)."""
    return np.asarray([s & 0xFFFFFFFF for s in seeds], dtype=np.uint32).view(np.int32).tolist()


class EnvPoolVecEnv:
    """envpool's vector env with VecEnv's interface and semantics (see the module docstring)."""

    on_device: Final = False  # a host env (vecenv.protocol.VecEnv)

    def __init__(self, cfg: EnvConfig, seed: int, env_offset: int = 0) -> None:
        p = plan(cfg)
        self.cfg = cfg
        self.info = p.info
        self.num_envs = cfg.num_envs
        self.num_threads = default_threads(cfg.num_envs)
        self.seeds = env_seeds(seed, cfg.num_envs, env_offset)
        self._make_kwargs, self._limit = p.make_kwargs, p.limit
        self._pool: Any = None  # envpool's vector env (an optional dependency, untyped)
        self._pool_seeds: list[int] | None = None
        self._fresh = False  # the pool was just built and not yet reset
        self._build(self.seeds)
        if self.info.action_kind == "gaussian":
            self._low = np.asarray(self.info.action_low, dtype=np.float32)
            self._high = np.asarray(self.info.action_high, dtype=np.float32)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.steps = 0  # vector steps taken in this run (restored on resume); for error messages
        self.action_space = gym.vector.utils.batch_space(
            _gym_action_space(self.info), self.num_envs
        )
        self.action_space.seed(self.seeds[0])

    def _build(self, seeds: list[int]) -> None:
        envpool = _import_envpool()
        if self._pool is not None:
            self._pool.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._pool = envpool.make_gymnasium(
                self.cfg.id,
                num_envs=self.num_envs,
                batch_size=self.num_envs,
                num_threads=self.num_threads,
                seed=_int32_seeds(seeds),
                max_episode_steps=_NO_LIMIT,
                **self._make_kwargs,
            )
            # Built (and cached) on first use, which would warn on every rebuild otherwise.
            self._pool.observation_space, self._pool.action_space  # noqa: B018
        self._pool_seeds, self._fresh = list(seeds), True

    def _where(self, ahead: int = 1) -> str:
        """The step being taken (`ahead` 1) or just taken (0), for error messages only."""
        step = self.steps + ahead
        return f"at step {step} (global step {step * self.num_envs:,})"

    def reset(self, seeds: list[int] | None = None) -> np.ndarray:
        """Reset every env (with `seeds`, default: the per-env seeds of the run); returns obs (N, D)."""
        seeds = list(seeds) if seeds is not None else self.seeds
        try:
            if not (self._fresh and seeds == self._pool_seeds):
                self._build(seeds)  # envpool seeds envs only when it builds them
            obs, info = self._pool.reset()
        except Exception as exc:
            raise TrainingError(f"environment reset failed ({type(exc).__name__}: {exc})") from exc
        self._fresh = False
        obs = self._by_env(obs, info["env_id"], np.float32)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._check_obs(obs, None)

    def _by_env(self, array: np.ndarray, env_id: np.ndarray, dtype: type) -> np.ndarray:
        """A copy of the pool's `array` with row k for env k (a sync pool keeps that order anyway)."""
        out = np.empty((self.num_envs, *np.shape(array)[1:]), dtype=dtype)
        out[env_id] = array
        return out

    def step(self, action: np.ndarray) -> StepResult:
        """Step with `action` (N, A) float or (N,) int; Box actions are clipped to the bounds here."""
        if self.info.action_kind == "gaussian":
            action = np.clip(action, self._low, self._high)
        try:
            obs, reward, term, trunc, info = self._pool.step(np.asarray(action))
        except Exception as exc:
            raise TrainingError(
                f"environment step failed ({type(exc).__name__}: {exc}) {self._where()}"
            ) from exc
        # Copies: the rows of ended envs get their reset observations below.
        order = info["env_id"]
        obs = self._by_env(obs, order, np.float32)
        reward = self._by_env(reward, order, np.float32)
        term = self._by_env(term, order, bool)
        trunc = self._by_env(trunc, order, bool)
        self._check_obs(obs)  # where an episode ended, this row is its final observation
        if not np.isfinite(reward).all():
            bad = int(np.flatnonzero(~np.isfinite(reward))[0])
            raise TrainingError(
                f"environment {bad} returned a non-finite reward {reward[bad]} {self._where()}"
            )
        self.steps += 1
        self._ep_return += reward
        self._ep_length += 1
        if self._limit is not None:
            trunc |= self._ep_length >= self._limit
        ended = term | trunc
        final_obs = obs  # rows are only meaningful where an episode ended
        if ended.any():
            final_obs = obs.copy()
            ids = np.flatnonzero(ended).astype(np.int32)
            try:
                reset_obs, reset_info = self._pool.reset(ids)
            except Exception as exc:
                raise TrainingError(
                    f"environment reset failed ({type(exc).__name__}: {exc}) {self._where(0)}"
                ) from exc
            obs[reset_info["env_id"]] = reset_obs
            self._check_obs(obs, ahead=0)
        return step_result(
            obs,
            reward,
            term,
            trunc,
            final_obs,
            ep_return=self._ep_return,
            ep_length=self._ep_length,
        )

    def sample_actions(self) -> np.ndarray:
        """Uniform random actions for every env (for benchmarks and smoke tests)."""
        return self.action_space.sample()

    def _check_obs(self, obs: np.ndarray, ahead: int | None = 1) -> np.ndarray:
        """Raise TrainingError naming the first env with a non-finite observation.

        `ahead` says which step to name (see `_where`); None: the observations of a reset.
        """
        if not np.isfinite(obs).all():
            bad = int(np.flatnonzero(~np.isfinite(obs).all(axis=-1))[0])
            where = "on reset" if ahead is None else self._where(ahead)
            raise TrainingError(f"environment {bad} returned a non-finite observation {where}")
        return obs

    # ------------------------------------------------------------------ resume
    def get_state(self) -> CheckpointState:
        """Checkpoint-safe state like VecEnv's, without members: envpool's cannot be captured."""
        return {
            "members": None,
            "not_captured": "env.backend envpool cannot capture its environments' state",
            "ep_return": torch.from_numpy(self._ep_return.copy()),
            "ep_length": torch.from_numpy(self._ep_length.copy()),
            "steps": self.steps,
        }

    def set_state(self, state: CheckpointState) -> str | None:
        """Restore the step count; returns why the envs themselves cannot be restored."""
        self.steps = int(state["steps"])
        return "env.backend envpool cannot restore its environments' state"

    def set_steps(self, steps: int) -> None:
        """The vector steps taken so far in the run (they number the steps in error messages)."""
        self.steps = steps

    def close(self) -> None:
        """Close the pool (its C++ threads end); closing twice does nothing."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> EnvPoolVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gym_action_space(info: SpaceInfo) -> gym.Space:
    if info.action_kind == "categorical":
        return gym.spaces.Discrete(info.action_dim)
    return gym.spaces.Box(
        np.asarray(info.action_low, dtype=np.float32),
        np.asarray(info.action_high, dtype=np.float32),
        dtype=np.float32,
    )
