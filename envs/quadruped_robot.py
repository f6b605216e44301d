"""The quadruped in MuJoCo: its model on a terrain, the PD loop that turns joint targets into
torques, and what its sensors read after a step.

The policy acts at 50 Hz: its action (12,) offsets the joint targets from the standing pose,
target = stand + action_scale * action, and a PD loop computed here at every 200 Hz physics
step turns targets into torques, torque = strength * clip(kp*(target - q) - kd*qd, limits)
(MuJoCo Playground's Go1 gains: kp 35, kd 0.5, action scale 0.5; see KP below).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.terrain import FlatTerrain, RoughTerrain, make_terrain

XML = Path(__file__).resolve().parent / "assets" / "quadruped.xml"
LEGS = ("FR", "FL", "RR", "RL")
# The standing pose (legged_gym's A1 default joint angles): hip abduction outwards 0.1 rad,
# thighs 0.8 (front) and 1.0 rad (rear), knees -1.5 rad; per leg FR, FL, RR, RL.
STAND = np.array([-0.1, 0.8, -1.5, 0.1, 0.8, -1.5, -0.1, 1.0, -1.5, 0.1, 1.0, -1.5])
# Torque limits (N m) of the hip, thigh and knee motors: MuJoCo Menagerie's Go1.
TORQUE_LIMIT = np.tile([23.7, 23.7, 35.55], 4)
# PD gains (N m/rad, N m s/rad) and action scale of MuJoCo Playground's Go1 joystick task
# (google-deepmind/mujoco_playground, locomotion/go1/joystick.py), which models the rotors'
# inertia as this MJCF does (armature 0.01). legged_gym's A1/Go1 values (kp 20, kd 0.5, scale
# 0.25, tuned in Isaac Gym without armature) are softer: here an open-loop 2 Hz trot with them
# never lifts a foot and the trunk sinks to 0.20 m, where kp 35 walks at 0.4-0.5 m/s.
KP, KD = 35.0, 0.5
ACTION_SCALE = 0.5
DECIMATION = 4  # physics steps per policy step: 200 Hz physics, 50 Hz policy
SPAWN_HEIGHT = 0.34  # trunk height at reset, m above the ground (feet 1-2 cm above it)


class QuadrupedRobot:
    """The robot's model and data on its terrain, its PD loop and its sensed state.

    Args:
        terrain: "flat" or "rough" (checked by the task); `terrain_options` configure the rough
            terrain (terrain.py).
        fall_contacts: the links whose touching the ground is a fall (trunk, hip, thigh,
            calf); the other leg links' contacts are collisions.

    After `sense()`: `v` the base's linear velocity and `g` the gravity direction (3,), both in
    the body frame; `contacts` (4,) the feet on the ground and `last_contacts` before this
    step; `leg_contacts` how many legs touch the ground with another link than the foot;
    `body_contact` whether a fall link touches it.
    """

    def __init__(
        self, terrain: str, terrain_options: dict[str, Any] | None, fall_contacts: tuple[str, ...]
    ) -> None:
        spec_xml = mujoco.MjSpec.from_file(str(XML))
        self.terrain: FlatTerrain | RoughTerrain = (
            FlatTerrain() if terrain == "flat" else make_terrain(spec_xml, terrain_options)
        )
        self.model = spec_xml.compile()
        self.data = mujoco.MjData(self.model)
        self.dt = self.model.opt.timestep * DECIMATION  # seconds per policy step

        def name(kind: mujoco.mjtObj, n: str) -> int:
            return mujoco.mj_name2id(self.model, kind, n)

        geom = mujoco.mjtObj.mjOBJ_GEOM
        self.trunk = name(mujoco.mjtObj.mjOBJ_BODY, "trunk")
        self.feet = np.array([name(geom, f"{leg}_foot") for leg in LEGS])
        self.foot_radius = float(self.model.geom_size[self.feet[0], 0])
        # Contact roles by geom: 1-4 a foot, 5-8 a leg link of leg 1-4 (a collision), 9 a fall.
        self._role = np.zeros(self.model.ngeom, dtype=np.int64)
        for i, leg in enumerate(LEGS):
            self._role[self.feet[i]] = 1 + i
            for link in ("hip", "thigh", "calf"):
                fall = link in fall_contacts
                self._role[name(geom, f"{leg}_{link}")] = 9 if fall else 5 + i
        self._role[name(geom, "trunk")] = 9 if "trunk" in fall_contacts else 0
        low, high = self.model.jnt_range[1:].T
        mid, half = (low + high) / 2, (high - low) / 2
        self.soft_low, self.soft_high = mid - 0.9 * half, mid + 0.9 * half

        # [strength, kp scale, kd scale] per motor: the PD loop multiplies them in, and a
        # domain randomizer writes them.
        self.actuator_scales = np.ones((3, 12))
        # Buffers (no allocation per step): joint positions and velocities and the motors'
        # controls are views of MuJoCo's arrays.
        self.q, self.qd, self.ctrl = self.data.qpos[7:], self.data.qvel[6:], self.data.ctrl
        self.target = np.zeros(12)  # the joint targets of the policy step
        self._tau = np.zeros(12)
        self._tmp = np.zeros(12)
        self._kp = np.zeros(12)
        self._kd = np.zeros(12)
        self._qinv = np.zeros(4)
        self.v = np.zeros(3)  # base linear velocity, body frame
        self.g = np.zeros(3)  # gravity direction, body frame
        self._down = np.array([0.0, 0.0, -1.0])
        # Episode state (the task saves it).
        self.last_qd = np.zeros(12)  # the joint velocities of the last policy step
        self.last_contacts = np.zeros(4, dtype=bool)
        self.contacts = np.zeros(4, dtype=bool)
        self.leg_contacts, self.body_contact = 0, False

    def place(
        self, position: tuple[float, float, float], yaw: float, rng: np.random.Generator
    ) -> None:
        """Start an episode at `position` (the ground under the trunk) facing `yaw`: the
        standing pose with joint noise, the trunk moving (MuJoCo Playground's Go1: +-0.5 m/s
        and rad/s per axis, so policies learn to walk from motion too, not only from rest)."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        x, y, z = position
        d.qpos[:3] = x, y, z + SPAWN_HEIGHT
        d.qpos[3:7] = math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)
        d.qpos[7:] = STAND + rng.uniform(-0.1, 0.1, 12)
        d.qvel[:6] = rng.uniform(-0.5, 0.5, 6)
        mujoco.mj_forward(m, d)
        self.last_qd[:] = self.qd
        self.last_contacts[:] = False
        self.contacts[:] = False

    def drive(self, applied: np.ndarray, action_scale: float, kp: float, kd: float) -> None:
        """Hold the targets stand + action_scale * `applied` (12,) for one policy step: the PD
        loop at every physics step, scaled by `actuator_scales`."""
        m, d = self.model, self.data
        np.multiply(applied, action_scale, out=self.target)
        self.target += STAND
        strength, kp_scale, kd_scale = self.actuator_scales
        np.multiply(kp_scale, kp, out=self._kp)
        np.multiply(kd_scale, kd, out=self._kd)
        q, qd, tau, tmp, ctrl = self.q, self.qd, self._tau, self._tmp, self.ctrl
        for _ in range(DECIMATION):
            np.subtract(self.target, q, out=tau)
            tau *= self._kp
            np.multiply(qd, self._kd, out=tmp)
            tau -= tmp
            np.minimum(tau, TORQUE_LIMIT, out=tau)
            np.maximum(tau, -TORQUE_LIMIT, out=tau)
            np.multiply(tau, strength, out=ctrl)
            mujoco.mj_step(m, d)

    def sense(self) -> None:
        """The body-frame velocity and gravity, and the contacts, of the state now."""
        d = self.data
        mujoco.mju_negQuat(self._qinv, d.qpos[3:7])
        mujoco.mju_rotVecQuat(self.v, d.qvel[:3], self._qinv)
        mujoco.mju_rotVecQuat(self.g, self._down, self._qinv)
        n = d.ncon
        self.last_contacts[:] = self.contacts
        if n:
            c = d.contact
            counts = np.bincount(self._role[c.geom1] + self._role[c.geom2], minlength=10)
            np.greater(counts[1:5], 0, out=self.contacts)
            self.leg_contacts = int(np.count_nonzero(counts[5:9]))
            self.body_contact = bool(counts[9])
        else:
            self.contacts[:] = False
            self.leg_contacts, self.body_contact = 0, False

    def physics_state(self) -> np.ndarray:
        """MuJoCo's integration state (positions, velocities, controls, time, ...)."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        physics = np.empty(mujoco.mj_stateSize(self.model, kind))
        mujoco.mj_getState(self.model, self.data, physics, kind)
        return physics

    def set_physics_state(self, physics: np.ndarray) -> None:
        """Restore `physics_state()` (positions for rendering recomputed; the next step
        recomputes everything else)."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        physics = np.asarray(physics, dtype=np.float64)
        if physics.shape != (mujoco.mj_stateSize(self.model, kind),):
            raise ValueError("the saved physics state does not fit this model")
        mujoco.mj_setState(self.model, self.data, physics, kind)
