"""The quadruped's observation: a Dict of flat float32 vectors.

The robot's own sensors (the actor's keys): base_ang_vel (3, rad/s, body frame),
projected_gravity (3), command (3: vx, vy m/s and yaw rate rad/s), joint_pos (12, rad, from the
standing pose), joint_vel (12, rad/s), last_action (12). Privileged keys, for the critic:
base_lin_vel (3, m/s, body frame), contacts (4, feet on the ground), friction (1), added_mass
(1, kg), motor_strength (12), height_scan (36: each foot's height above the terrain at 9
points around it, m).
"""

from __future__ import annotations

import numpy as np
from embodied_ppo_envs.quadruped_robot import STAND, QuadrupedRobot
from embodied_ppo_envs.randomizer import DomainRandomizer
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


def observation_space() -> spaces.Dict:
    """Every key (`SIZES`), unbounded float32 vectors."""
    return spaces.Dict({k: spaces.Box(-np.inf, np.inf, (n,), np.float32) for k, n in SIZES.items()})


class QuadrupedObservations:
    """Reads the observation of `robot` (noise is the task's to add)."""

    def __init__(self, robot: QuadrupedRobot, randomizer: DomainRandomizer) -> None:
        self.robot, self.randomizer = robot, randomizer
        grid = np.linspace(-0.1, 0.1, 3)
        self._scan_offsets = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)
        self._scan_xy = np.zeros((4, SCAN_POINTS, 2))
        self._scan_h = np.zeros((4, SCAN_POINTS))

    def read(self, command: np.ndarray, action: np.ndarray) -> dict[str, np.ndarray]:
        """The observation now, under `command` (3,) after the policy's last `action` (12,)."""
        r = self.robot
        d = r.data
        f32 = np.float32
        friction = self.randomizer.value("friction")
        mass = self.randomizer.value("added_mass")
        return {
            "base_ang_vel": d.qvel[3:6].astype(f32),
            "projected_gravity": r.g.astype(f32),
            "command": command.astype(f32),
            "joint_pos": (r.q - STAND).astype(f32),
            "joint_vel": r.qd.astype(f32),
            "last_action": action.astype(f32),
            "base_lin_vel": r.v.astype(f32),
            "contacts": r.contacts.astype(f32),
            "friction": np.array([1.0 if friction is None else friction[0]], f32),
            "added_mass": np.array([0.0 if mass is None else mass[0]], f32),
            "motor_strength": r.actuator_scales[0].astype(f32),
            "height_scan": self._height_scan(),
        }

    def _height_scan(self) -> np.ndarray:
        r = self.robot
        feet = r.data.geom_xpos[r.feet]  # (4, 3)
        np.add(feet[:, None, :2], self._scan_offsets[None], out=self._scan_xy)
        r.terrain.height_at(self._scan_xy, self._scan_h)
        scan = (feet[:, 2:3] - r.foot_radius) - self._scan_h
        return scan.reshape(-1).astype(np.float32)
