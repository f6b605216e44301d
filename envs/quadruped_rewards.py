"""The quadruped's reward: legged_gym's terms (`REWARD_TERMS`) weighted and summed each step,
the episodes' running sums, and the episode log that `info["log"]` carries; arrays over the
robots (one row each).

With `only_positive` a negative sum is clipped to 0 (termination's term is added after). The
log holds, at every step, the episode's values so far: `rewards/<term>` (sum of the weighted
term), `metrics/tracking_error_lin` (mean |v_cmd - v| m/s), `metrics/tracking_error_yaw`
(rad/s), `metrics/fall_rate` (1 on a fall) and, on rough ground, `metrics/terrain_level`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from embodied_ppo_envs.quadruped_robot import STAND, QuadrupedRobots

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
# The running sums of an episode (columns of `QuadrupedRewards.episode`): steps, tracking
# errors, fall, start point, the distance its commands asked for and the distance its trunk
# travelled (m, along its path).
EPISODE_SUMS = ("steps", "err_lin", "err_yaw", "fell", "start_x", "start_y", "commanded", "path")
_STEPS, _LIN, _YAW, _FELL, _X, _Y, _COMMANDED, _PATH = range(len(EPISODE_SUMS))


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
    episodes' sums, one row per robot: `episode_terms` (N, terms), `episode` (N, sums; see
    `EPISODE_SUMS`), `air_time` (N, 4), `prev_action` (N, 12)."""

    def __init__(self, settings: RewardSettings, dt: float, count: int) -> None:
        s = self.settings = settings
        self.dt = dt
        self.terms = [k for k, w in s.weights.items() if w != 0.0]
        self._log_keys = [f"rewards/{t}" for t in self.terms]
        self._weights_dt = np.array([s.weights[k] for k in self.terms]) * dt
        self._termination_weight = s.weights["termination"] * dt
        # Episode state (the task saves it).
        self.air_time = np.zeros((count, 4))
        self.episode_terms = np.zeros((count, len(self.terms)))
        self.prev_action = np.zeros((count, 12))  # the action of the step before
        self.episode = np.zeros((count, len(EPISODE_SUMS)))

    def reset(self, row: int, x: float, y: float) -> None:
        """A new episode of robot `row`, starting at (x, y)."""
        self.air_time[row] = 0.0
        self.episode_terms[row] = 0.0
        self.prev_action[row] = 0.0
        self.episode[row] = 0.0
        self.episode[row, _X], self.episode[row, _Y] = x, y

    def step(
        self, robots: QuadrupedRobots, action: np.ndarray, command: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rewards (N,) of the step that brought the robots where they are (after their
        `sense()`), for the policy's `action` (N, 12) under `command` (N, 3), and which fell."""
        s, dt = self.settings, self.dt
        v, w, g = robots.v, robots.qvel[:, 3:6], robots.g
        err_xy = command[:, :2] - v[:, :2]
        err_lin2 = _square_sum(err_xy)
        err_yaw = command[:, 2] - w[:, 2]
        moving = _square_sum(command[:, :2]) > 0.01
        fell = robots.body_contact | (-g[:, 2] < s.fall_cos)
        # Feet air time (legged_gym): reward each touchdown by its air time minus a target.
        touch = robots.contacts | robots.last_contacts
        first = (self.air_time > 0.0) & touch
        self.air_time += dt
        values = {}
        on = set(self.terms)
        sigma = s.tracking_sigma
        values["tracking_lin_vel"] = np.exp(-err_lin2 / sigma)
        values["tracking_ang_vel"] = np.exp(-err_yaw * err_yaw / sigma)
        values["lin_vel_z"] = v[:, 2] * v[:, 2]
        values["ang_vel_xy"] = w[:, 0] * w[:, 0] + w[:, 1] * w[:, 1]
        values["orientation"] = g[:, 0] * g[:, 0] + g[:, 1] * g[:, 1]
        if "torques" in on:
            values["torques"] = _square_sum(robots.torque)
        if "dof_acc" in on:
            values["dof_acc"] = _square_sum(robots.qd - robots.last_qd) / (dt * dt)
        if "action_rate" in on:
            values["action_rate"] = _square_sum(action - self.prev_action)
        air = ((self.air_time - s.air_time_target) * first).sum(axis=1)
        values["feet_air_time"] = np.where(moving, air, 0.0)
        self.air_time *= ~touch
        values["collision"] = robots.leg_contacts.astype(np.float64)
        values["termination"] = fell.astype(np.float64)
        if "stand_still" in on:
            still = ~moving & (np.abs(command[:, 2]) < 0.1)
            values["stand_still"] = np.where(still, np.abs(robots.q - STAND).sum(axis=1), 0.0)
        if "dof_pos_limits" in on:
            below = np.minimum(robots.q - robots.soft_low, 0.0)
            above = np.maximum(robots.q - robots.soft_high, 0.0)
            values["dof_pos_limits"] = above.sum(axis=1) - below.sum(axis=1)
        if "base_height" in on:
            feet_z = robots.feet[:, :, 2].mean(axis=1) - robots.foot_radius
            values["base_height"] = (robots.qpos[:, 2] - feet_z - s.base_height_target) ** 2
        if "pose" in on:
            offset = robots.q - STAND
            values["pose"] = np.exp(-(offset * offset * POSE_WEIGHTS).sum(axis=1))
        weighted = np.stack([values[t] for t in self.terms], axis=1) * self._weights_dt
        self.prev_action[:] = action
        self.episode_terms += weighted
        total = weighted.sum(axis=1)
        if s.only_positive:
            term = fell * self._termination_weight
            total = np.maximum(total - term, 0.0) + term
        ep = self.episode
        ep[:, _STEPS] += 1
        ep[:, _LIN] += np.sqrt(err_lin2)
        ep[:, _YAW] += np.abs(err_yaw)
        ep[:, _FELL] = fell
        ep[:, _COMMANDED] += np.sqrt(_square_sum(command[:, :2])) * dt
        ep[:, _PATH] += np.sqrt(_square_sum(v[:, :2])) * dt
        return total, fell

    def summary(self, row: int) -> dict[str, float]:
        """Robot `row`'s episode sums by name (`EPISODE_SUMS`)."""
        return dict(zip(EPISODE_SUMS, self.episode[row].tolist()))

    def log(self, row: int, level: int | None) -> dict[str, float]:
        """Robot `row`'s episode so far (`level`: its terrain level, None on flat ground)."""
        ep = self.episode[row]
        steps = max(1.0, ep[_STEPS])
        log = dict(zip(self._log_keys, self.episode_terms[row].tolist()))
        log["metrics/tracking_error_lin"] = float(ep[_LIN] / steps)
        log["metrics/tracking_error_yaw"] = float(ep[_YAW] / steps)
        log["metrics/fall_rate"] = float(ep[_FELL])
        if level is not None:
            log["metrics/terrain_level"] = float(level)
        return log


def _square_sum(x: np.ndarray) -> np.ndarray:
    """Each row's sum of squares: (n, k) -> (n,), the same whatever n (a row's sum does not
    depend on the other rows: numpy sums each row of a reduction over the last axis alone)."""
    return (x * x).sum(axis=1)
