"""EmbodiedPPO/Push-v0: push a free block to a goal on the table."""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.arm import ArmEnv
from gymnasium import spaces

# Where the block starts: far enough out that the fingertip must reach it with the elbow open
# (folded against its joint limit, the arm's tip stays within 0.15 m of the base).
BLOCK_RADIUS, BLOCK_ANGLE = (0.18, 0.24), (-0.5, 0.5)
GOAL_OFFSET = (0.06, 0.15)  # how far the goal is from the block's start (any direction)
GOAL_RADIUS = (0.12, 0.29)  # the goal stays where the arm can bring the block
PUSH_OFFSET = 0.05  # the pushing point: this far behind the block's centre, away from the goal
SHAPING_SCALE = 0.05  # metres at which the saturating terms of the reward are half spent
# Folded behind the base, clear of the block; each episode mirrors it (all angles negated) to
# the other side with probability 1/2.
ARM_START = np.array([2.8, 1.5, 1.0])


class PushEnv(ArmEnv):
    """Push a block (a free 6 cm cube, 80 g, with friction) to a goal 6-15 cm from
    where it starts. The arm starts folded behind its base, on a side drawn at random, and its
    shoulder turns without a stop (Reach's stops at +-3 rad), so it can come round the back of
    its base to either side of the block.

    Observation (25,): the arm (cos, sin of the joint angles, joint velocities / 10), the
    fingertip, the block's position, its yaw (cos, sin) and planar velocity, the goal, block
    minus goal, fingertip minus block and fingertip minus pushing point (metres, on the table).
    Reward, with d_goal = |block - goal| and d_push = |fingertip - pushing point| (the point
    5 cm behind the block's centre on the line from the goal through the block, where a push
    moves the block toward the goal):

        -d_goal + (1 - tanh(d_goal / 5 cm)) + 0.5 (1 - tanh(d_push / 5 cm))
        - control_cost |action|^2 + success_bonus [d_goal < success_distance]

    The linear term pulls from afar, the saturating ones are steep near their targets; the
    reaching term says from which side to push. `info["is_success"]`: within
    `success_distance` now.
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
        **mujoco_kwargs: Any,
    ) -> None:
        self.success_distance = success_distance
        self.control_cost = control_cost
        self.success_bonus = success_bonus
        space = spaces.Box(-np.inf, np.inf, (25,), np.float32)
        own = {
            "success_distance": success_distance,
            "control_cost": control_cost,
            "success_bonus": success_bonus,
        }
        super().__init__("push.xml", space, render_mode, width, height, own, **mujoco_kwargs)
        self.block_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "block")
        # The shoulder turns without a stop here (a yaw joint of unlimited range), so the arm
        # can come at the block from either side. With the +-3 rad stop of arm_common.xml, an
        # arm folded on the +y side could reach the far (-y) side of the block only by squeezing
        # past it folded, and goals that need a push from there failed.
        shoulder = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, "shoulder")
        self.model.jnt_limited[shoulder] = 0

    def block(self) -> np.ndarray:
        return self.data.xpos[self.block_body, :2].copy()

    def push_point(self) -> np.ndarray:
        """Where the fingertip pushes from: PUSH_OFFSET behind the block, away from the goal."""
        block, goal = self.block(), self.target()
        away = block - goal
        norm = float(np.linalg.norm(away))
        if norm < 1e-9:  # on the goal: any side will do
            return block
        return block + PUSH_OFFSET * away / norm

    def block_yaw(self) -> float:
        w, x, y, z = self.data.xquat[self.block_body]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def reset_model(self) -> Any:
        side = 1.0 if self.np_random.random() < 0.5 else -1.0
        self.set_arm(side * ARM_START, noise=0.1)
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
                tip - self.push_point(),
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
            + (1.0 - np.tanh(distance / SHAPING_SCALE))
            + 0.5 * (1.0 - np.tanh(float(np.linalg.norm(tip - self.push_point())) / SHAPING_SCALE))
            - self.control_cost * float(np.square(action).sum())
            + self.success_bonus * success
        )
        if self.render_mode == "human":
            self.render()
        info = {"distance": distance, "is_success": float(success)}
        return self._get_obs(), reward, False, False, info
