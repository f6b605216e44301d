"""The quadruped's reward: legged_gym's terms (`REWARD_TERMS`) weighted and summed each step,
the episode's running sums, and the episode log that `info["log"]` carries.

With `only_positive` a negative sum is clipped to 0 (termination's term is added after). The
log holds, at every step, the episode's values so far: `rewards/<term>` (sum of the weighted
term), `metrics/tracking_error_lin` (mean |v_cmd - v| m/s), `metrics/tracking_error_yaw`
(rad/s), `metrics/fall_rate` (1 on a fall) and, on rough ground, `metrics/terrain_level`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from embodied_ppo_envs.quadruped_robot import STAND, QuadrupedRobot

# The pose term's weights per joint: the knees may bend freely, hips and thighs less so.
POSE_WEIGHTS = np.tile([1.0, 1.0, 0.1], 4)

# Reward terms and their default weights (legged_gym's base and A1 configurations; weights
# multiply the term and dt).
REWARD_TERMS = {
    "tracking_lin_vel": 1.0,  # exp(-|v_cmd_xy - v_xy|^2 / sigma)
    "tracking_ang_vel": 0.5,  # exp(-(yaw_cmd - w_z)^2 / sigma)
    "lin_vel_z": -2.0,  # v_z^2
    "ang_vel_xy": -0.05,  # |w_xy|^2
    "orientation": -0.0,  # |g_xy|^2, the tilt
    "torques": -0.0002,  # sum of torque^2
    "dof_acc": -2.5e-7,  # sum of joint acceleration^2
    "action_rate": -0.01,  # |a - a_prev|^2
    "feet_air_time": 1.0,  # sum over touchdowns of (air time - air_time_target), when moving
    "collision": -1.0,  # leg links (not feet) touching the ground, counted per leg
    "termination": -0.0,  # 1 on a fall
    "stand_still": -0.0,  # sum |q - stand| when the command is zero
    "dof_pos_limits": -0.0,  # how far joints pass 90% of their range (rad)
    "base_height": -0.0,  # (trunk height above the feet - base_height_target)^2
    "pose": 0.0,  # exp(-sum w (q - stand)^2), w = 1, 1, 0.1 per hip, thigh, knee (Playground)
}


def new_episode(x: float, y: float) -> dict[str, float]:
    """Running sums of an episode: steps, tracking errors, fall, start point, the distance
    its commands asked for and the distance its trunk travelled (m, along its path)."""
    return {
        "steps": 0,
        "err_lin": 0.0,
        "err_yaw": 0.0,
        "fell": 0.0,
        "start_x": x,
        "start_y": y,
        "commanded": 0.0,
        "path": 0.0,
    }


@dataclass(frozen=True)
class RewardSettings:
    """The reward's checked settings (the task's arguments of the same names).

    Attributes:
        weights: every term of `REWARD_TERMS` and its weight.
        tracking_sigma: width of the tracking kernels ((m/s)^2 and (rad/s)^2).
        only_positive: clip a negative step reward to 0 (before the termination term).
        fall_cos: the cosine of the tilt beyond which the robot has fallen.
        base_height_target: trunk height above the feet (m) the base_height term asks for.
        air_time_target: the air time (s) a step must last for feet_air_time to be positive.
    """

    weights: dict[str, float]
    tracking_sigma: float
    only_positive: bool
    fall_cos: float
    base_height_target: float
    air_time_target: float


class QuadrupedRewards:
    """The weighted terms of each step (those of weight 0 are not computed), and the
    episode's sums: `episode_terms` per weighted term, `episode` (see `new_episode`)."""

    def __init__(self, settings: RewardSettings, dt: float) -> None:
        s = self.settings = settings
        self.dt = dt
        self.terms = [k for k, w in s.weights.items() if w != 0.0]
        self.weights = np.array([s.weights[k] for k in self.terms])
        self._log_keys = [f"rewards/{t}" for t in self.terms]
        names = list(REWARD_TERMS)
        self._term_ids = np.array([names.index(t) for t in self.terms], dtype=np.int64)
        self._enabled = [name in self.terms for name in names]
        self._weights_dt = self.weights * dt
        self._termination_weight = s.weights["termination"] * dt
        self._tmp = np.zeros(12)
        # Episode state (the task saves it).
        self.air_time = np.zeros(4)
        self.episode_terms = np.zeros(len(self.terms))
        self.prev_action = np.zeros(12)  # the action of the step before
        self.episode = new_episode(0.0, 0.0)

    def reset(self, x: float, y: float) -> None:
        """A new episode starting at (x, y)."""
        self.air_time[:] = 0.0
        self.episode_terms[:] = 0.0
        self.prev_action[:] = 0.0
        self.episode = new_episode(x, y)

    def step(
        self, robot: QuadrupedRobot, action: np.ndarray, command: np.ndarray
    ) -> tuple[float, bool]:
        """The reward of the step that brought `robot` where it is (after `robot.sense()`),
        for the policy's `action` (12,) under `command` (3,), and whether the robot fell."""
        s, dt, d = self.settings, self.dt, robot.data
        vx, vy, vz = robot.v.tolist()
        wx, wy, wz = d.qvel[3:6].tolist()
        cx, cy, cyaw = command.tolist()
        gx, gy, gz = robot.g.tolist()
        err_lin2 = (cx - vx) ** 2 + (cy - vy) ** 2
        err_yaw = cyaw - wz
        moving = cx * cx + cy * cy > 0.01
        fell = robot.body_contact or -gz < s.fall_cos
        # Feet air time (legged_gym): reward each touchdown by its air time minus a target.
        touch = robot.contacts | robot.last_contacts
        first = (self.air_time > 0.0) & touch
        self.air_time += dt
        air = float(np.dot(self.air_time - s.air_time_target, first)) if moving else 0.0
        self.air_time *= ~touch
        on = self._enabled
        tmp = self._tmp
        sigma = s.tracking_sigma
        # Every term in REWARD_TERMS order; those that cost numpy calls only when weighted.
        values = [
            math.exp(-err_lin2 / sigma),
            math.exp(-err_yaw * err_yaw / sigma),
            vz * vz,
            wx * wx + wy * wy,
            gx * gx + gy * gy,
            float(np.dot(robot.ctrl, robot.ctrl)) if on[5] else 0.0,
            0.0,
            0.0,
            air,
            robot.leg_contacts,
            float(fell),
            0.0,
            0.0,
            0.0,
            0.0,
        ]
        if on[6]:  # dof_acc
            np.subtract(robot.qd, robot.last_qd, out=tmp)
            values[6] = float(np.dot(tmp, tmp)) / (dt * dt)
        if on[7]:  # action_rate
            np.subtract(action, self.prev_action, out=tmp)
            values[7] = float(np.dot(tmp, tmp))
        if on[11] and not moving and abs(cyaw) < 0.1:  # stand_still
            np.subtract(robot.q, STAND, out=tmp)
            values[11] = float(np.abs(tmp, out=tmp).sum())
        if on[12]:  # dof_pos_limits
            below = np.minimum(robot.q - robot.soft_low, 0.0)
            above = np.maximum(robot.q - robot.soft_high, 0.0)
            values[12] = float(above.sum() - below.sum())
        if on[13]:  # base_height, above the feet
            feet_z = d.geom_xpos[robot.feet, 2].mean() - robot.foot_radius
            values[13] = (d.qpos[2] - feet_z - s.base_height_target) ** 2
        if on[14]:  # pose
            np.subtract(robot.q, STAND, out=tmp)
            tmp *= tmp
            values[14] = math.exp(-float(np.dot(tmp, POSE_WEIGHTS)))
        weighted = np.take(values, self._term_ids) * self._weights_dt
        self.prev_action[:] = action
        self.episode_terms += weighted
        total = float(weighted.sum())
        if s.only_positive:
            term = float(fell) * self._termination_weight
            total = max(total - term, 0.0) + term
        ep = self.episode
        ep["steps"] += 1
        ep["err_lin"] += math.sqrt(err_lin2)
        ep["err_yaw"] += abs(err_yaw)
        ep["fell"] = float(fell)
        ep["commanded"] += math.sqrt(cx * cx + cy * cy) * dt
        ep["path"] += math.sqrt(vx * vx + vy * vy) * dt
        return total, fell

    def log(self, level: int | None) -> dict[str, float]:
        """The episode's values so far (`level`: the terrain level, None on flat ground)."""
        ep = self.episode
        steps = max(1, ep["steps"])
        log = dict(zip(self._log_keys, self.episode_terms.tolist()))
        log["metrics/tracking_error_lin"] = ep["err_lin"] / steps
        log["metrics/tracking_error_yaw"] = ep["err_yaw"] / steps
        log["metrics/fall_rate"] = ep["fell"]
        if level is not None:
            log["metrics/terrain_level"] = float(level)
        return log
