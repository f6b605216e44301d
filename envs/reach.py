"""EmbodiedPPO/Reach-v0: move the arm's fingertip to a random target on the table."""

from __future__ import annotations

from typing import Any

import numpy as np
from embodied_ppo_envs.arm import ArmEnv
from gymnasium import spaces

# Where targets appear: anywhere the fingertip can reach comfortably (the arm is 0.32 m long).
TARGET_RADIUS = (0.10, 0.28)
TARGET_ANGLE = (-np.pi, np.pi)


class ReachEnv(ArmEnv):
    """Reach a target with the fingertip of a three-joint arm.

    Observation (15,): cos and sin of the joint angles, joint velocities / 10, the fingertip
    position, the target position and their difference (metres, on the table).
    Reward: -distance(fingertip, target) - control_cost x |action|^2, plus `success_bonus`
    on every step the fingertip is within `success_distance` of the target.
    `info["is_success"]`: within `success_distance` now; `info["distance"]`.
    Episodes: 100 steps (2 s), no termination. Seeded by `reset(seed=...)`.
    """

    def __init__(
        self,
        *,
        success_distance: float = 0.03,
        control_cost: float = 0.01,
        success_bonus: float = 1.0,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
        xml: str = "reach.xml",
        observation_space: spaces.Space | None = None,
        task_kwargs: dict[str, Any] | None = None,
        **mujoco_kwargs: Any,
    ) -> None:
        self.success_distance = success_distance
        self.control_cost = control_cost
        self.success_bonus = success_bonus
        space = observation_space or spaces.Box(-np.inf, np.inf, (15,), np.float32)
        own = {
            "success_distance": success_distance,
            "control_cost": control_cost,
            "success_bonus": success_bonus,
        }
        super().__init__(
            xml, space, render_mode, width, height, {**own, **(task_kwargs or {})}, **mujoco_kwargs
        )

    def reset_model(self) -> Any:
        self.set_arm(np.zeros(3), noise=0.1)
        self.set_target(self.sample_point(TARGET_RADIUS, TARGET_ANGLE))
        return self._get_obs()

    def _get_obs(self) -> Any:
        tip, target = self.fingertip(), self.target()
        return np.concatenate([self.arm_state(), tip, target, tip - target]).astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        action = np.asarray(action, dtype=np.float64)
        self.do_simulation(action, self.frame_skip)
        distance = float(np.linalg.norm(self.fingertip() - self.target()))
        success = distance < self.success_distance
        reward = (
            -distance
            - self.control_cost * float(np.square(action).sum())
            + self.success_bonus * success
        )
        if self.render_mode == "human":
            self.render()
        info = {"distance": distance, "is_success": float(success)}
        return self._get_obs(), reward, False, False, info
