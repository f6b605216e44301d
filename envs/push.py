"""EmbodiedPPO/Push-v0: push a free block to a goal on the table."""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.arm import ArmEnv
from gymnasium import spaces

BLOCK_RADIUS, BLOCK_ANGLE = (0.14, 0.20), (-0.5, 0.5)  # where the block starts
GOAL_OFFSET = (0.06, 0.15)  # how far the goal is from the block's start (any direction)
GOAL_RADIUS = (0.10, 0.27)  # the goal stays where the arm can bring the block
ARM_START = np.array([2.8, 1.5, 1.0])  # folded behind the base, clear of the block


class PushEnv(ArmEnv):
    """Push a block (a free 6 cm cube, 80 g, with friction) to a goal 6-15 cm from
    where it starts.

    Observation (23,): the arm (cos, sin of the joint angles, joint velocities / 10), the
    fingertip, the block's position, its yaw (cos, sin) and planar velocity, the goal, block
    minus goal and fingertip minus block (metres, on the table).
    Reward: -distance(block, goal) - 0.5 x distance(fingertip, block) - control_cost x
    |action|^2, plus `success_bonus` on every step the block is within `success_distance` of
    the goal. `info["is_success"]`: within `success_distance` now.
    Episodes: 150 steps (3 s), no termination. Seeded by `reset(seed=...)`.
    """

    def __init__(
        self,
        success_distance: float = 0.04,
        control_cost: float = 0.01,
        success_bonus: float = 1.0,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 480,
    ) -> None:
        self.success_distance = success_distance
        self.control_cost = control_cost
        self.success_bonus = success_bonus
        space = spaces.Box(-np.inf, np.inf, (23,), np.float32)
        super().__init__(
            "push.xml",
            space,
            render_mode,
            width,
            height,
            success_distance=success_distance,
            control_cost=control_cost,
            success_bonus=success_bonus,
        )
        self.block_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "block")

    def block(self) -> np.ndarray:
        return self.data.xpos[self.block_body, :2].copy()

    def block_yaw(self) -> float:
        w, x, y, z = self.data.xquat[self.block_body]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def reset_model(self) -> Any:
        self.set_arm(ARM_START, noise=0.1)
        start = self.sample_point(BLOCK_RADIUS, BLOCK_ANGLE)
        goal = start + self.sample_point(GOAL_OFFSET, (-np.pi, np.pi))
        while not GOAL_RADIUS[0] <= np.linalg.norm(goal) <= GOAL_RADIUS[1]:
            goal = start + self.sample_point(GOAL_OFFSET, (-np.pi, np.pi))
        q, v = self.data.qpos.copy(), self.data.qvel.copy()
        q[3:5] = start  # the block's free joint: x, y, z, then its orientation
        q[5] = 0.03  # resting on the table
        yaw = self.np_random.uniform(-np.pi, np.pi)
        q[6:10] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        v[3:] = 0.0
        self.set_state(q, v)
        self.set_target(goal, z=0.001)  # the goal is drawn flat on the table
        return self._get_obs()

    def _get_obs(self) -> np.ndarray:
        tip, block, goal = self.fingertip(), self.block(), self.target()
        yaw = self.block_yaw()
        return np.concatenate(
            [
                self.arm_state(),
                tip,
                block,
                [np.cos(yaw), np.sin(yaw)],
                self.data.qvel[3:5],
                goal,
                block - goal,
                tip - block,
            ]
        ).astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = np.asarray(action, dtype=np.float64)
        self.do_simulation(action, self.frame_skip)
        block, goal, tip = self.block(), self.target(), self.fingertip()
        distance = float(np.linalg.norm(block - goal))
        success = distance < self.success_distance
        reward = (
            -distance
            - 0.5 * float(np.linalg.norm(tip - block))
            - self.control_cost * float(np.square(action).sum())
            + self.success_bonus * success
        )
        if self.render_mode == "human":
            self.render()
        info = {"distance": distance, "is_success": float(success)}
        return self._get_obs(), reward, False, False, info
