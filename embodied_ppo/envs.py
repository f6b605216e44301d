"""The only module that touches Gymnasium vector environments.

`VecEnv` wraps a sync or async gymnasium vector env in SAME_STEP autoreset mode and hands the
collector plain numpy arrays: observations, rewards, terminated/truncated flags, the final
observation of every episode that ended this step, and finished-episode statistics (raw returns).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from embodied_ppo.config import EnvConfig
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


def check_env_id(env_id: str) -> None:
    """Raise ConfigError for an id Gymnasium does not know, suggesting close matches."""
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"env.id: unknown environment {env_id!r}{hint}")


def _make_one(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    kwargs = dict(cfg.kwargs)
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return gym.make(cfg.id, **kwargs)


def space_info(cfg: EnvConfig) -> SpaceInfo:
    """Build one env to read its spaces; unsupported spaces are config errors."""
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


class VecEnv:
    """A gymnasium vector env with SAME_STEP autoreset, action clipping and episode statistics."""

    def __init__(self, cfg: EnvConfig, seed: int, env_offset: int = 0) -> None:
        self.cfg = cfg
        self.num_envs = cfg.num_envs
        self.seeds = env_seeds(seed, cfg.num_envs, env_offset)
        fns = [lambda: _make_one(cfg) for _ in range(cfg.num_envs)]
        mode = {"autoreset_mode": AutoresetMode.SAME_STEP}
        if cfg.backend == "async":
            self.env: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(fns, **mode)
        else:
            self.env = gym.vector.SyncVectorEnv(fns, **mode)
        self.info = _space_info(
            self.env.single_observation_space, self.env.single_action_space, cfg.id
        )
        if self.info.action_kind == "gaussian":
            self._low = np.asarray(self.info.action_low, dtype=np.float32)
            self._high = np.asarray(self.info.action_high, dtype=np.float32)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.env.action_space.seed(self.seeds[0])

    def reset(self, seeds: list[int] | None = None) -> np.ndarray:
        """Reset every env (with `seeds`, default: the per-env seeds of the run); returns obs (N, D)."""
        obs, _ = self.env.reset(seed=seeds if seeds is not None else self.seeds)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._check_obs(np.asarray(obs, dtype=np.float32))

    def step(self, action: np.ndarray) -> StepResult:
        """Step with `action` (N, A) float or (N,) int; Box actions are clipped to the bounds here."""
        if self.info.action_kind == "gaussian":
            action = np.clip(action, self._low, self._high)
        try:
            obs, reward, term, trunc, info = self.env.step(action)
        except Exception as exc:  # an env or a worker process failed
            raise TrainingError(f"environment step failed ({type(exc).__name__}: {exc})") from exc
        obs = self._check_obs(np.asarray(obs, dtype=np.float32))
        reward = np.asarray(reward, dtype=np.float32)
        term, trunc = np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool)
        ended = term | trunc
        final_obs = obs.copy()
        if ended.any():
            mask = info.get("_final_obs", ended)
            for i in np.flatnonzero(mask):
                final_obs[i] = info["final_obs"][i]
            self._check_obs(final_obs)
        if not np.isfinite(reward).all():
            bad = int(np.flatnonzero(~np.isfinite(reward))[0])
            raise TrainingError(f"environment {bad} returned a non-finite reward {reward[bad]}")
        self._ep_return += reward
        self._ep_length += 1
        rets = self._ep_return[ended].tolist()
        lens = self._ep_length[ended].tolist()
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0
        return StepResult(obs, reward, term, trunc, final_obs, rets, lens)

    def sample_actions(self) -> np.ndarray:
        """Uniform random actions for every env (for benchmarks and smoke tests)."""
        return self.env.action_space.sample()

    @staticmethod
    def _check_obs(obs: np.ndarray) -> np.ndarray:
        if not np.isfinite(obs).all():
            bad = int(np.flatnonzero(~np.isfinite(obs).all(axis=-1))[0])
            raise TrainingError(f"environment {bad} returned a non-finite observation")
        return obs

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
