"""Partially observed classic-control tasks: CartPole and Pendulum without their velocities.

A memoryless policy sees where the pole is but not where it is going; a recurrent policy can
infer the velocities from the observations it has seen. `MaskObservation` is the wrapper that
hides them; it works around any env with a Box observation (`env.wrappers` in a config:
`{name: "embodied_ppo_envs.pomdp:MaskObservation", kwargs: {keep: [0, 2]}}`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class MaskObservation(gym.ObservationWrapper):
    """Keep only the entries `keep` of a flat Box observation, in that order."""

    def __init__(self, env: gym.Env, keep: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation needs a flat Box observation, got {space}")
        self.keep = np.asarray(list(keep), dtype=np.int64)
        if self.keep.size == 0 or self.keep.min() < 0 or self.keep.max() >= space.shape[0]:
            raise ValueError(
                f"MaskObservation: keep {list(keep)} must name entries 0..{space.shape[0] - 1}"
            )
        self.observation_space = spaces.Box(
            space.low[self.keep], space.high[self.keep], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    """CartPole observing the cart position and the pole angle only (no velocities)."""
    return MaskObservation(CartPoleEnv(**kwargs), keep=[0, 2])


def pendulum_no_velocity(**kwargs: Any) -> gym.Env:
    """Pendulum observing cos and sin of its angle only (no angular velocity)."""
    return MaskObservation(PendulumEnv(**kwargs), keep=[0, 1])
