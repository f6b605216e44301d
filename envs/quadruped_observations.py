"""The quadruped's observation: a Dict of flat float32 vectors, read for any rows of the robots
at once (arrays of leading size n, one row per robot).

The robot's own sensors (the actor's keys): base_ang_vel (3, rad/s, body frame),
projected_gravity (3), command (3: vx, vy m/s and yaw rate rad/s), joint_pos (12, rad, from the
standing pose), joint_vel (12, rad/s), last_action (12). Privileged keys, for the critic:
base_lin_vel (3, m/s, body frame), contacts (4, feet on the ground), friction (1), added_mass
(1, kg), motor_strength (12), height_scan (36: each foot's height above the terrain at 9
points around it, m).
"""

from __future__ import annotations

import numpy as np
from embodied_ppo_envs.quadruped_robot import STAND, QuadrupedRobots
from gymnasium import spaces

ACTOR_KEYS = (
    "base_ang_vel",
    "projected_gravity",
    "command",
    "joint_pos",
    "joint_vel",
    "last_action",
)
PRIVILEGED_KEYS = (
    "base_lin_vel",
    "contacts",
    "friction",
    "added_mass",
    "motor_strength",
    "height_scan",
)
SCAN_POINTS = 9  # per foot: a 3 x 3 grid, 0.1 m apart, centred under the foot
SIZES = {
    "base_ang_vel": 3,
    "projected_gravity": 3,
    "command": 3,
    "joint_pos": 12,
    "joint_vel": 12,
    "last_action": 12,
    "base_lin_vel": 3,
    "contacts": 4,
    "friction": 1,
    "added_mass": 1,
    "motor_strength": 12,
    "height_scan": 4 * SCAN_POINTS,
}
_GRID = np.linspace(-0.1, 0.1, 3)
SCAN_OFFSETS = np.stack(np.meshgrid(_GRID, _GRID, indexing="ij"), -1).reshape(-1, 2)  # (9, 2)


def observation_space() -> spaces.Dict:
    """Every key (`SIZES`), unbounded float32 vectors."""
    return spaces.Dict({k: spaces.Box(-np.inf, np.inf, (n,), np.float32) for k, n in SIZES.items()})


class Episodes:
    """What the observation reads of the episodes beside the robot: per row, the command (3),
    the policy's last action (12), and the randomized friction, payload and motor strengths
    (the episode's draws; 1, 0 and 1 where a term is off)."""

    def __init__(self, count: int) -> None:
        self.command = np.zeros((count, 3))
        self.action = np.zeros((count, 12))
        self.friction = np.ones(count)
        self.added_mass = np.zeros(count)
        self.strength = np.ones((count, 12))


def read(
    robots: QuadrupedRobots, episodes: Episodes, rows: np.ndarray | slice = slice(None)
) -> dict[str, np.ndarray]:
    """The observation of `rows` now (noise is the task's to add): each key (n, size)."""
    f32 = np.float32
    return {
        "base_ang_vel": robots.qvel[rows, 3:6].astype(f32),
        "projected_gravity": robots.g[rows].astype(f32),
        "command": episodes.command[rows].astype(f32),
        "joint_pos": (robots.q[rows] - STAND).astype(f32),
        "joint_vel": robots.qd[rows].astype(f32),
        "last_action": episodes.action[rows].astype(f32),
        "base_lin_vel": robots.v[rows].astype(f32),
        "contacts": robots.contacts[rows].astype(f32),
        "friction": episodes.friction[rows, None].astype(f32),
        "added_mass": episodes.added_mass[rows, None].astype(f32),
        "motor_strength": episodes.strength[rows].astype(f32),
        "height_scan": height_scan(robots, rows),
    }


def height_scan(robots: QuadrupedRobots, rows: np.ndarray | slice) -> np.ndarray:
    """Each foot's height above the terrain at the 9 points around it: (n, 36) float32."""
    feet = robots.feet[rows]  # (n, 4, 3)
    xy = feet[:, :, None, :2] + SCAN_OFFSETS  # (n, 4, 9, 2)
    ground = np.empty(xy.shape[:-1])
    robots.terrain.height_at(xy, ground)
    scan = (feet[:, :, 2:3] - robots.foot_radius) - ground
    return scan.reshape(len(feet), -1).astype(np.float32)
