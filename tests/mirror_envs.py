"""Environments that declare a mirror (`metadata["mirror"]`), good and bad, for tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.pendulum import PendulumEnv

# Pendulum's mirror: the angle (and so its sine and rate) and the torque change sign.
PENDULUM_MIRROR = {"observation": {"negate": [1, 2]}, "action": {"negate": [0]}}


class MirrorPendulum(PendulumEnv):
    """Pendulum-v1, whose dynamics and reward are symmetric under theta -> -theta, declaring
    that mirror."""

    metadata = {**PendulumEnv.metadata, "mirror": PENDULUM_MIRROR}


class SidesEnv(gym.Env):
    """Dict observations with a left and a right side and a shared part; two actions per side.

    The mirror swaps the sides (key `left` from `right` and back), negates the shared part's
    first entry and swaps the actions of the two sides, negating the first of each. Reward: the
    actions' agreement with the state, so every step is informative.
    """

    metadata = {
        "render_modes": [],
        "mirror": {
            "observation": {
                "left": {"source": "right"},
                "right": {"source": "left"},
                "shared": {"negate": [0]},
            },
            "action": {"perm": [2, 3, 0, 1], "negate": [0, 2]},
        },
    }

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "left": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                "right": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                "shared": spaces.Box(-np.inf, np.inf, (3,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.state = np.zeros(7)
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        s = self.state.astype(np.float32)
        return {"left": s[:2], "right": s[2:4], "shared": s[4:]}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=7)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        reward = -float(np.square(a - self.state[:4]).sum())
        self.state = 0.9 * self.state + 0.1 * self.np_random.normal(size=7)
        self.state[:4] += 0.1 * a
        self.t += 1
        return self._obs(), reward, False, self.t >= 20, {}


class _Declares(PendulumEnv):
    """Pendulum declaring the mirror its class gives (the bad ones below)."""

    metadata = {**PendulumEnv.metadata, "mirror": None}


class WrongSizeMirror(_Declares):
    """A mirror whose observation permutation has two entries for three."""

    metadata = {
        **PendulumEnv.metadata,
        "mirror": {"observation": {"perm": [0, 1]}, "action": {"negate": [0]}},
    }


class NotInvolutionMirror(_Declares):
    """A mirror that negates an entry but not the one it swaps with."""

    metadata = {
        **PendulumEnv.metadata,
        "mirror": {"observation": {"perm": [0, 2, 1], "negate": [1]}, "action": {}},
    }


IDS = {
    "EmbodiedPPOTestMirrorPendulum-v0": (MirrorPendulum, 200),
    "EmbodiedPPOTestSides-v0": (SidesEnv, None),
    "EmbodiedPPOTestWrongSizeMirror-v0": (WrongSizeMirror, 200),
    "EmbodiedPPOTestNotInvolutionMirror-v0": (NotInvolutionMirror, 200),
}


def register() -> None:
    """Register every id of `IDS` (importing this module does it too)."""
    for env_id, (entry, limit) in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry, max_episode_steps=limit)


register()
