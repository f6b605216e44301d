"""The quadrupeds in MuJoCo: one model and data per robot (each robot's randomized values live
in its own model), the joint controllers, and what the sensors read after a step, as arrays
over the robots (leading size N).

The policy acts at 50 Hz: its action (12,) offsets the joint targets from the standing pose,
target = stand + action_scale * action, and a PD controller turns targets into torques at
every 200 Hz physics step, torque = strength * clip(kp*(target - q) - kd*qd, limits)
(MuJoCo Playground's Go1 gains: kp 35, kd 0.5, action scale 0.5; see KP below).

The controllers are MuJoCo position actuators: gain kp, bias (0, -kp, -kd), force range the
torque limits, scaled by [strength, kp scale, kd scale] per motor
(`randomization.PositionActuators`), which is the formula above with its products
distributed (equal to float rounding; tests/envs/test_quadruped_batch.py). The target is the
actuators' control, constant over a policy step, so MuJoCo runs the 4 physics steps of a
policy step in one call (`mj_step(..., nstep=4)`, which releases Python's GIL: with
`threads` > 1 a thread pool steps the robots' physics in parallel).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
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
# The physics a task may simulate. accurate: every link of the robot touches the ground (knees
# are collisions, or falls), MuJoCo's Newton solver to convergence (10 iterations at most) and
# implicit joint damping. fast: MuJoCo Playground's Go1 setup (mujoco_playground's
# go1_mjx_feetonly.xml): only the feet, the hips and the trunk touch the ground, one solver
# iteration of 5 line-search steps, explicit joint damping (0.01 N m s/rad, which the 200 Hz
# step integrates stably either way). Their costs, side by side on the same states:
# docs/bench/quadruped_speed.json (mj_step_per_s, mj_step_fast_per_s).
PHYSICS = ("accurate", "fast")
SPAWN_HEIGHT = 0.34  # trunk height at reset, m above the ground (feet 1-2 cm above it)


def robot_spec(
    terrain: str,
    terrain_options: dict[str, Any] | None,
    kp: float,
    kd: float,
    *,
    physics: str = "accurate",
) -> tuple[mujoco.MjSpec, FlatTerrain | RoughTerrain]:
    """The robot's MjSpec on its terrain, the motors made position actuators of gains `kp`,
    `kd` and the torque limits as force ranges; and the terrain. `physics` "fast" is MuJoCo
    Playground's cheaper Go1 setup (see `PHYSICS`)."""
    spec = mujoco.MjSpec.from_file(str(XML))
    ground: FlatTerrain | RoughTerrain = (
        FlatTerrain() if terrain == "flat" else make_terrain(spec, terrain_options)
    )
    if physics == "fast":
        for geom in spec.geoms:
            if geom.name.endswith(("_thigh", "_calf")):
                geom.contype = geom.conaffinity = 0  # no contact with the ground
        spec.option.iterations, spec.option.ls_iterations = 1, 5
        spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    for actuator, limit in zip(spec.actuators, TORQUE_LIMIT, strict=True):
        actuator.set_to_position(kp=kp, kv=kd)
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-limit, limit]
        actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
    return spec, ground


class QuadrupedRobots:
    """N robots' models and data on one terrain, their controllers and their sensed state.

    Args:
        spec: the robot's MjSpec (`robot_spec`); compiled once, copied per robot.
        terrain: the terrain the spec stands on (shared: it is the world, not a draw).
        fall_contacts: the links whose touching the ground is a fall (trunk, hip, thigh,
            calf); the other leg links' contacts are collisions.
        count: N.
        threads: threads stepping the physics (1: this thread).

    After `sense()`, per robot (rows): `qpos` (N, 19), `qvel` (N, 18), `q`, `qd` (N, 12) the
    joints, `v` the base's linear velocity and `g` the gravity direction (N, 3), both in the
    body frame, `torque` (N, 12) the actuators' torques of the last physics step, `feet`
    (N, 4, 3) the feet's centres, `contacts` (N, 4) the feet on the ground and
    `last_contacts` before this step; `leg_contacts` (N,) how many legs touch the ground with
    another link than the foot; `body_contact` (N,) whether a fall link touches it. Contacts
    and feet are those MuJoCo found at the start of the last physics step.
    """

    def __init__(
        self,
        spec: mujoco.MjSpec,
        terrain: FlatTerrain | RoughTerrain,
        fall_contacts: tuple[str, ...],
        count: int,
        threads: int = 1,
    ) -> None:
        model = spec.compile()
        self.terrain, self.count = terrain, count
        self.models = [model] + [_copy(model) for _ in range(count - 1)]
        self.datas = [mujoco.MjData(m) for m in self.models]
        self.dt = model.opt.timestep * DECIMATION  # seconds per policy step

        def name(kind: mujoco.mjtObj, n: str) -> int:
            return mujoco.mj_name2id(model, kind, n)

        geom = mujoco.mjtObj.mjOBJ_GEOM
        self.trunk = name(mujoco.mjtObj.mjOBJ_BODY, "trunk")
        self.feet_geoms = np.array([name(geom, f"{leg}_foot") for leg in LEGS])
        # A slice where the feet are evenly spaced (they are: one per leg body, same layout),
        # which reads faster than an index array.
        step = int(self.feet_geoms[1] - self.feet_geoms[0])
        evenly = np.array_equal(np.diff(self.feet_geoms), [step] * 3) and step > 0
        self._feet_index: slice | np.ndarray = (
            slice(int(self.feet_geoms[0]), int(self.feet_geoms[-1]) + 1, step)
            if evenly
            else self.feet_geoms
        )
        self.foot_radius = float(model.geom_size[self.feet_geoms[0], 0])
        # Contact roles by geom: 1-4 a foot, 5-8 a leg link of leg 1-4 (a collision), 9 a fall.
        self._role = np.zeros(model.ngeom, dtype=np.int64)
        for i, leg in enumerate(LEGS):
            self._role[self.feet_geoms[i]] = 1 + i
            for link in ("hip", "thigh", "calf"):
                fall = link in fall_contacts
                self._role[name(geom, f"{leg}_{link}")] = 9 if fall else 5 + i
        self._role[name(geom, "trunk")] = 9 if "trunk" in fall_contacts else 0
        low, high = model.jnt_range[1:].T
        mid, half = (low + high) / 2, (high - low) / 2
        self.soft_low, self.soft_high = mid - 0.9 * half, mid + 0.9 * half

        n = count
        self.qpos, self.qvel = np.zeros((n, model.nq)), np.zeros((n, model.nv))
        self.q, self.qd = self.qpos[:, 7:], self.qvel[:, 6:]  # views: the joints
        self.torque = np.zeros((n, 12))
        self.feet = np.zeros((n, 4, 3))
        self.target = np.zeros((n, 12))  # the joint targets of the policy step
        self.v, self.g = np.zeros((n, 3)), np.zeros((n, 3))
        # Episode state (the task saves it).
        self.last_qd = np.zeros((n, 12))  # the joint velocities of the last policy step
        self.last_contacts = np.zeros((n, 4), dtype=bool)
        self.contacts = np.zeros((n, 4), dtype=bool)
        self.leg_contacts = np.zeros(n, dtype=np.int64)
        self.body_contact = np.zeros(n, dtype=bool)
        self._counts = np.zeros((n, 10), dtype=np.int64)
        bounds = np.linspace(0, n, max(1, min(threads, n)) + 1).round().astype(int)
        self._chunks = [range(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        self._pool = ThreadPoolExecutor(len(self._chunks) - 1) if len(self._chunks) > 1 else None

    # ------------------------------------------------------------------ episodes
    def place(
        self, row: int, position: tuple[float, float, float], yaw: float, rng: np.random.Generator
    ) -> None:
        """Start robot `row`'s episode at `position` (the ground under the trunk) facing `yaw`:
        the standing pose with joint noise, the trunk moving (MuJoCo Playground's Go1: +-0.5 m/s
        and rad/s per axis, so policies learn to walk from motion too, not only from rest)."""
        m, d = self.models[row], self.datas[row]
        mujoco.mj_resetData(m, d)
        x, y, z = position
        d.qpos[:3] = x, y, z + SPAWN_HEIGHT
        d.qpos[3:7] = math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)
        d.qpos[7:] = STAND + rng.uniform(-0.1, 0.1, 12)
        d.qvel[:6] = rng.uniform(-0.5, 0.5, 6)
        mujoco.mj_forward(m, d)
        self.contacts[row] = False
        self._read(row)
        self.last_qd[row] = self.qd[row]

    # ------------------------------------------------------------------ stepping
    def drive(self, applied: np.ndarray, action_scale: float) -> None:
        """Hold the targets stand + action_scale * `applied` (N, 12) for one policy step on
        every robot (the actuators' controls), then read the new state (`sense`)."""
        np.multiply(applied, action_scale, out=self.target)
        self.target += STAND
        if self._pool is None:
            self._step(self._chunks[0])
        else:
            futures = [self._pool.submit(self._step, rows) for rows in self._chunks[1:]]
            self._step(self._chunks[0])
            for future in futures:
                future.result()
        self.sense()

    def _step(self, rows: range) -> None:
        models, datas, target, step = self.models, self.datas, self.target, mujoco.mj_step
        for i in rows:
            d = datas[i]
            d.ctrl[:] = target[i]
            step(models[i], d, DECIMATION)
            self._read(i)

    def _read(self, i: int) -> None:
        """Robot i's state into the arrays (the body-frame quantities are `_sense`'s)."""
        d = self.datas[i]
        self.qpos[i] = d.qpos
        self.qvel[i] = d.qvel
        self.torque[i] = d.actuator_force
        self.feet[i] = d.geom_xpos[self._feet_index]
        if d.ncon:
            g = d.contact.geom
            self._counts[i] = np.bincount(self._role[g[:, 0]] + self._role[g[:, 1]], minlength=10)
        else:
            self._counts[i] = 0

    def sense(self, rows: np.ndarray | slice = slice(None)) -> None:
        """The body-frame velocity and gravity, and the contacts, of `rows` (default: every
        robot) as the last physics step (or placing) left them."""
        self.last_contacts[rows] = self.contacts[rows]
        counts = self._counts[rows]
        self.contacts[rows] = counts[:, 1:5] > 0
        self.leg_contacts[rows] = np.count_nonzero(counts[:, 5:9], axis=1)
        self.body_contact[rows] = counts[:, 9] > 0
        quat, vel = self.qpos[rows, 3:7], self.qvel[rows, :3]
        down = np.zeros_like(vel)
        down[:, 2] = -1.0
        self.v[rows] = rotate_inverse(quat, vel)
        self.g[rows] = rotate_inverse(quat, down)

    # ------------------------------------------------------------------ exact resume
    def physics_state(self, row: int) -> np.ndarray:
        """Robot `row`'s MuJoCo integration state (positions, velocities, controls, time)."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        physics = np.empty(mujoco.mj_stateSize(self.models[row], kind))
        mujoco.mj_getState(self.models[row], self.datas[row], physics, kind)
        return physics

    def set_physics_state(self, row: int, physics: np.ndarray) -> None:
        """Restore `physics_state(row)`; positions and contacts are recomputed (mj_forward), so
        what the last step read (`qpos`, `torque`, `feet`, the contacts) is restored by the
        task's own arrays, not from here."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        m, d = self.models[row], self.datas[row]
        physics = np.asarray(physics, dtype=np.float64)
        if physics.shape != (mujoco.mj_stateSize(m, kind),):
            raise ValueError("the saved physics state does not fit this model")
        mujoco.mj_setState(m, d, physics, kind)
        mujoco.mj_kinematics(m, d)

    def close(self) -> None:
        """Stop the physics threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def rotate_inverse(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Each `vec` (n, 3) rotated by the inverse of its unit quaternion `quat` (n, 4, w first):
    the world vector in the body's frame. With u = -xyz and t = 2 u x v: v + w t + u x t."""
    w = quat[:, :1]
    u = -quat[:, 1:]
    t = 2.0 * _cross(u, vec)
    return vec + w * t + _cross(u, t)


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cross products of (n, 3) arrays (np.cross, without its axis handling)."""
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    b0, b1, b2 = b[:, 0], b[:, 1], b[:, 2]
    return np.stack((a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0), axis=1)


def _copy(model: mujoco.MjModel) -> mujoco.MjModel:
    """An independent copy of a compiled model (each robot's randomization writes its own)."""
    import copy

    return copy.copy(model)
