"""Tiny deterministic environments whose observations reveal what happened (for tests)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CountingEnv(gym.Env):
    """obs = [t, 1]; reward = the applied (clipped) action; terminates when t reaches `terminate_at`."""

    metadata = {"render_modes": []}

    def __init__(self, terminate_at: int | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.terminate_at = terminate_at
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float(np.asarray(action).reshape(-1)[0])
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return np.array([float(self.t), 1.0], dtype=np.float32), reward, terminated, False, {}


def register() -> str:
    env_id = "EmbodiedPPOTestCounting-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=CountingEnv)
    return env_id
