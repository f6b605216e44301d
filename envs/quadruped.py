"""EmbodiedPPO/QuadrupedFlat-v0 and QuadrupedRough-v0: a Go1-class quadruped follows velocity
commands, trained with the tools that carry a policy to hardware.

The policy acts at 50 Hz: its action (12,) offsets the joint targets from the standing pose,
target = stand + action_scale * action, and a PD loop computed here at every 200 Hz physics
step turns targets into torques, torque = strength * clip(kp*(target - q) - kd*qd, limits)
(MuJoCo Playground's Go1 gains: kp 35, kd 0.5, action scale 0.5; see KP below).

Observation: a Dict of flat float32 vectors. The robot's own sensors (the actor's keys):
base_ang_vel (3, rad/s, body frame), projected_gravity (3), command (3: vx, vy m/s and yaw
rate rad/s), joint_pos (12, rad, from the standing pose), joint_vel (12, rad/s), last_action
(12). Privileged keys, for the critic: base_lin_vel (3, m/s, body frame), contacts (4, feet
on the ground), friction (1), added_mass (1, kg), motor_strength (12), height_scan (36: each
foot's height above the terrain at 9 points around it, m).

Reward: a weighted sum of legged_gym's terms (`REWARD_TERMS`), each x dt; with
`only_positive_rewards` a negative sum is clipped to 0 (termination's term is added after).
Episodes end on a fall (trunk or hip on the ground, or a tilt beyond `fall_tilt`) and
are truncated by the registered time limit (1000 steps, 20 s). `info["log"]` holds, at every
step, the episode's values so far: `rewards/<term>` (sum of the weighted term),
`metrics/tracking_error_lin` (mean |v_cmd - v| m/s), `metrics/tracking_error_yaw` (rad/s),
`metrics/fall_rate` (1 on a fall) and, on rough ground, `metrics/terrain_level`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc
from embodied_ppo_envs.camera import OffscreenCamera
from embodied_ppo_envs.commands import CommandSpec, VelocityCommands, parse_commands
from embodied_ppo_envs.randomization import (
    ActionDelay,
    ObservationNoise,
    rng_state,
    set_rng_state,
    stream,
)
from embodied_ppo_envs.sim2real import (
    DomainRandomizer,
    parse_delay,
    parse_noise,
    parse_randomization,
)
from embodied_ppo_envs.terrain import FlatTerrain, make_terrain
from gymnasium import spaces

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
# The largest |command| this robot is given (vx, vy m/s, yaw rate rad/s): a trot of a 12 kg
# robot with 0.213 m links; command ranges beyond them are refused.
COMMAND_LIMITS = (2.0, 1.0, 2.0)
SPAWN_HEIGHT = 0.34  # trunk height at reset, m above the ground (feet 1-2 cm above it)

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

DEFAULT_COMMANDS = {
    "lin_vel_x": [-1.0, 1.0],
    "lin_vel_y": [-0.6, 0.6],
    "yaw_rate": [-1.0, 1.0],
    "resample_s": 10.0,
    "stand_prob": 0.1,
    "zero_prob": [0.0, 0.0, 0.0],
    "curriculum": None,
}


def _new_episode(x: float, y: float) -> dict[str, float]:
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


class QuadrupedEnv(gym.Env):
    """A Go1-class quadruped that follows velocity commands (see the module docstring).

    Args:
        terrain: "flat" or "rough"; `terrain_options` configure the rough terrain (terrain.py).
        commands: command ranges ([low, high] for lin_vel_x, lin_vel_y, yaw_rate), resample_s,
            stand_prob, zero_prob (per component) and curriculum (true, or {initial, step,
            max_error}).
        command_schedule: [[time_s, vx, vy, yaw_rate], ...] replaces random commands.
        rewards: weights by term (merged over `REWARD_TERMS`; an unknown term is refused).
        tracking_sigma: width of the tracking kernels ((m/s)^2 and (rad/s)^2).
        only_positive_rewards: clip a negative step reward to 0 (before the termination term).
        randomization: friction, added_mass, com_offset, motor_strength, kp_scale, kd_scale,
            push_interval_s, push_velocity (see sim2real.parse_randomization).
        noise: observation key -> noise scale (units of the key); noise_distribution: uniform
            (half-width) or gaussian (std).
        action_delay: k (a delay of 0..k policy steps drawn per episode) or [low, high].
        action_scale, kp, kd: the PD targets' scale and gains.
        fall_tilt: tilt (rad) beyond which the episode ends as a fall.
        fall_contacts: the links whose touching the ground ends the episode as a fall (trunk,
            hip, thigh, calf); the other leg links' contacts are collisions. legged_gym's A1
            ends episodes on trunk contact only: a knee on the ground is not yet a fall.
        base_height_target: trunk height above the feet (m) the base_height term asks for
            (0.27 m on the standing pose's targets, the knees sagging under the trunk's weight).
        air_time_target: the air time (s) a step must last for the feet_air_time term to be
            positive (legged_gym: 0.5 s; MuJoCo Playground's Go1: 0.1 s).
        render_mode, width, height, camera_name: `rgb_array` frames (camera "track" follows
            the robot).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        terrain: str = "flat",
        terrain_options: dict[str, Any] | None = None,
        commands: dict[str, Any] | None = None,
        command_schedule: list[list[float]] | None = None,
        rewards: dict[str, float] | None = None,
        tracking_sigma: float = 0.25,
        only_positive_rewards: bool = True,
        randomization: dict[str, Any] | None = None,
        noise: dict[str, float] | None = None,
        noise_distribution: str = "uniform",
        action_delay: int | list[int] = 0,
        action_scale: float = ACTION_SCALE,
        kp: float = KP,
        kd: float = KD,
        fall_tilt: float = 1.0,
        fall_contacts: list[str] | tuple[str, ...] = ("trunk", "hip"),
        base_height_target: float = 0.28,
        air_time_target: float = 0.5,
        render_mode: str | None = None,
        width: int = 480,
        height: int = 360,
        camera_name: str = "track",
    ) -> None:
        # ------------------------------------------------------------- settings, checked
        weights = tc.mapping(rewards, "rewards")
        tc.unknown_names(weights, REWARD_TERMS, "rewards")
        weights = {k: tc.number(v, f"rewards.{k}") for k, v in {**REWARD_TERMS, **weights}.items()}
        self.terms = [k for k, w in weights.items() if w != 0.0]
        self.weights = np.array([weights[k] for k in self.terms])
        self.tracking_sigma = tc.number(tracking_sigma, "tracking_sigma", low=1e-6)
        self.only_positive = bool(only_positive_rewards)
        self.command_spec: CommandSpec = parse_commands(
            commands, command_schedule, COMMAND_LIMITS, DEFAULT_COMMANDS
        )
        spec = parse_randomization(randomization)
        if noise_distribution not in ("uniform", "gaussian"):
            raise tc.TaskConfigError(
                "noise_distribution", f"got {noise_distribution!r}, allowed: uniform, gaussian"
            )
        noise_scales = parse_noise(noise, [*ACTOR_KEYS, *PRIVILEGED_KEYS])
        delay = parse_delay(action_delay)
        self.action_scale = tc.number(action_scale, "action_scale", low=0.0)
        self.kp = tc.number(kp, "kp", low=0.0)
        self.kd = tc.number(kd, "kd", low=0.0)
        self.fall_cos = math.cos(tc.number(fall_tilt, "fall_tilt", 0.0, math.pi))
        if not isinstance(fall_contacts, (list, tuple)):
            raise tc.TaskConfigError("fall_contacts", f"got {fall_contacts!r}, expected a list")
        tc.unknown_names(fall_contacts, ("trunk", "hip", "thigh", "calf"), "fall_contacts")
        self.fall_contacts = tuple(fall_contacts)
        self.base_height_target = tc.number(base_height_target, "base_height_target", 0.1, 0.4)
        self.air_time_target = tc.number(air_time_target, "air_time_target", 0.0, 2.0)
        if terrain not in ("flat", "rough"):
            raise tc.TaskConfigError("terrain", f"got {terrain!r}, allowed: flat, rough")
        if terrain == "flat" and terrain_options:
            raise tc.TaskConfigError("terrain_options", "only the rough terrain has options")

        # ------------------------------------------------------------- the model
        spec_xml = mujoco.MjSpec.from_file(str(XML))
        self.terrain = (
            FlatTerrain() if terrain == "flat" else make_terrain(spec_xml, terrain_options)
        )
        self.model = spec_xml.compile()
        self.data = mujoco.MjData(self.model)
        self.dt = self.model.opt.timestep * DECIMATION  # seconds per policy step
        self._name = lambda kind, n: mujoco.mj_name2id(self.model, kind, n)
        geom = mujoco.mjtObj.mjOBJ_GEOM
        self.trunk = self._name(mujoco.mjtObj.mjOBJ_BODY, "trunk")
        self.feet = np.array([self._name(geom, f"{leg}_foot") for leg in LEGS])
        self.foot_radius = float(self.model.geom_size[self.feet[0], 0])
        # Contact roles by geom: 1-4 a foot, 5-8 a leg link of leg 1-4 (a collision), 9 a fall.
        self._role = np.zeros(self.model.ngeom, dtype=np.int64)
        for i, leg in enumerate(LEGS):
            self._role[self.feet[i]] = 1 + i
            for link in ("hip", "thigh", "calf"):
                fall = link in self.fall_contacts
                self._role[self._name(geom, f"{leg}_{link}")] = 9 if fall else 5 + i
        self._role[self._name(geom, "trunk")] = 9 if "trunk" in self.fall_contacts else 0
        low, high = self.model.jnt_range[1:].T
        mid, half = (low + high) / 2, (high - low) / 2
        self._soft_low, self._soft_high = mid - 0.9 * half, mid + 0.9 * half

        # ------------------------------------------------------------- sim-to-real parts
        # [strength, kp scale, kd scale] per motor: the PD loop multiplies them in, and the
        # randomizer (or a DomainRandomization wrapper) writes them.
        self.actuator_scales = np.ones((3, 12))
        self.randomizer = DomainRandomizer(
            spec, self.model, self.data, self.trunk, self.dt, self.actuator_scales
        )
        self.noise = ObservationNoise(noise_scales, noise_distribution)
        self.delay = ActionDelay(delay[0], delay[1], 12)
        self.commands = VelocityCommands(self.command_spec, self.dt)
        self.rngs = {name: stream(None, name) for name in ("commands", "noise", "delay", "terrain")}

        # ------------------------------------------------------------- spaces
        sizes = {
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
        self.observation_space = spaces.Dict(
            {k: spaces.Box(-np.inf, np.inf, (n,), np.float32) for k, n in sizes.items()}
        )
        # Policies rarely leave +-5: that is +-1.25 rad from the standing pose at scale 0.25.
        self.action_space = spaces.Box(-5.0, 5.0, (12,), np.float32)

        # ------------------------------------------------------------- buffers (no allocation per step)
        self._q, self._qd, self._ctrl = self.data.qpos[7:], self.data.qvel[6:], self.data.ctrl
        self._target = np.zeros(12)
        self._tau = np.zeros(12)
        self._tmp = np.zeros(12)
        self._kp = np.zeros(12)
        self._kd = np.zeros(12)
        self._qinv = np.zeros(4)
        self._v = np.zeros(3)  # base linear velocity, body frame
        self._g = np.zeros(3)  # gravity direction, body frame
        self._down = np.array([0.0, 0.0, -1.0])
        grid = np.linspace(-0.1, 0.1, 3)
        self._scan_offsets = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)
        self._scan_xy = np.zeros((4, SCAN_POINTS, 2))
        self._scan_h = np.zeros((4, SCAN_POINTS))
        self._log_keys = [f"rewards/{t}" for t in self.terms]
        names = list(REWARD_TERMS)
        self._term_ids = np.array([names.index(t) for t in self.terms], dtype=np.int64)
        self._enabled = [name in self.terms for name in names]
        self._weights_dt = self.weights * self.dt
        self._termination_weight = weights["termination"] * self.dt
        # Episode state (saved by state_dict).
        self.action = np.zeros(12)  # the policy's last action (clipped to the action space)
        self.last_qd = np.zeros(12)
        self.air_time = np.zeros(4)
        self.last_contacts = np.zeros(4, dtype=bool)
        self.contacts = np.zeros(4, dtype=bool)
        self.episode_terms = np.zeros(len(self.terms))
        self.episode = _new_episode(0.0, 0.0)
        self._prev_action = np.zeros(12)
        self._leg_contacts, self._body_contact = 0, False
        self.level = 0  # terrain curriculum level (rough)
        self.started = False  # an episode has begun since the last seeded reset

        self.render_mode = render_mode
        self.width, self.height, self.camera_name = width, height, camera_name
        self._renderer: OffscreenCamera | None = None

    # ================================================================= episode
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.rngs = {name: stream(seed, name) for name in self.rngs}
            self.randomizer.seed(seed)
            self.commands.restart()
            self.level = self.terrain.initial_level
            self.started = False
        elif self.started:
            self._end_episode()
        self.started = True
        self.randomizer.reset()
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        rng = self.np_random
        x, y, z = self.terrain.spawn(self.level, self.rngs["terrain"])
        yaw = rng.uniform(-math.pi, math.pi)
        d.qpos[:3] = x, y, z + SPAWN_HEIGHT
        d.qpos[3:7] = math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)
        d.qpos[7:] = STAND + rng.uniform(-0.1, 0.1, 12)
        # The trunk starts moving (MuJoCo Playground's Go1: +-0.5 m/s and rad/s per axis), so
        # policies learn to walk from motion too, not only to start from rest.
        d.qvel[:6] = rng.uniform(-0.5, 0.5, 6)
        mujoco.mj_forward(m, d)
        self.commands.reset(self.rngs["commands"])
        self.delay.reset(self.rngs["delay"])
        self.action[:] = 0.0
        self.last_qd[:] = self._qd
        self.air_time[:] = 0.0
        self.last_contacts[:] = False
        self.contacts[:] = False
        self.episode_terms[:] = 0.0
        self._prev_action[:] = 0.0
        self.episode = _new_episode(x, y)
        self._update_state()
        return self._observation(), {"log": self._log()}

    def _end_episode(self) -> None:
        """Curricula learn from the episode that just ended."""
        ep = self.episode
        steps = max(1, ep["steps"])
        fell = ep["fell"] > 0.0
        self.commands.end_episode(ep["err_lin"] / steps, fell)
        d = self.data
        walked = math.hypot(d.qpos[0] - ep["start_x"], d.qpos[1] - ep["start_y"])
        self.level = self.terrain.next_level(self.level, walked, ep["path"], ep["commanded"], fell)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        m, d = self.model, self.data
        # Clipped to the action space (minimum/maximum: np.clip's float32 -> float64 path is slow).
        np.maximum(np.minimum(action, 5.0, out=self.action), -5.0, out=self.action)
        applied = self.delay.push(self.action)
        np.multiply(applied, self.action_scale, out=self._target)
        self._target += STAND
        self.randomizer.step()  # a push, when one is due
        strength, kp_scale, kd_scale = self.actuator_scales
        np.multiply(kp_scale, self.kp, out=self._kp)
        np.multiply(kd_scale, self.kd, out=self._kd)
        q, qd, tau, tmp, ctrl = self._q, self._qd, self._tau, self._tmp, self._ctrl
        for _ in range(DECIMATION):
            np.subtract(self._target, q, out=tau)
            tau *= self._kp
            np.multiply(qd, self._kd, out=tmp)
            tau -= tmp
            np.minimum(tau, TORQUE_LIMIT, out=tau)
            np.maximum(tau, -TORQUE_LIMIT, out=tau)
            np.multiply(tau, strength, out=ctrl)
            mujoco.mj_step(m, d)
        self._update_state()
        reward, fell = self._reward()
        self.commands.step(self.rngs["commands"])
        self.last_qd[:] = qd
        return self._observation(), reward, fell, False, {"log": self._log()}

    # ================================================================= state after a step
    def _update_state(self) -> None:
        d = self.data
        mujoco.mju_negQuat(self._qinv, d.qpos[3:7])
        mujoco.mju_rotVecQuat(self._v, d.qvel[:3], self._qinv)
        mujoco.mju_rotVecQuat(self._g, self._down, self._qinv)
        n = d.ncon
        self.last_contacts[:] = self.contacts
        if n:
            c = d.contact
            counts = np.bincount(self._role[c.geom1] + self._role[c.geom2], minlength=10)
            np.greater(counts[1:5], 0, out=self.contacts)
            self._leg_contacts = int(np.count_nonzero(counts[5:9]))
            self._body_contact = bool(counts[9])
        else:
            self.contacts[:] = False
            self._leg_contacts, self._body_contact = 0, False

    def _reward(self) -> tuple[float, bool]:
        d, dt = self.data, self.dt
        vx, vy, vz = self._v.tolist()
        wx, wy, wz = d.qvel[3:6].tolist()
        cx, cy, cyaw = self.commands.command.tolist()
        gx, gy, gz = self._g.tolist()
        err_lin2 = (cx - vx) ** 2 + (cy - vy) ** 2
        err_yaw = cyaw - wz
        moving = cx * cx + cy * cy > 0.01
        fell = self._body_contact or -gz < self.fall_cos
        # Feet air time (legged_gym): reward each touchdown by its air time minus a target.
        touch = self.contacts | self.last_contacts
        first = (self.air_time > 0.0) & touch
        self.air_time += dt
        air = float(np.dot(self.air_time - self.air_time_target, first)) if moving else 0.0
        self.air_time *= ~touch
        on = self._enabled
        tmp = self._tmp
        sigma = self.tracking_sigma
        # Every term in REWARD_TERMS order; those that cost numpy calls only when weighted.
        values = [
            math.exp(-err_lin2 / sigma),
            math.exp(-err_yaw * err_yaw / sigma),
            vz * vz,
            wx * wx + wy * wy,
            gx * gx + gy * gy,
            float(np.dot(self._ctrl, self._ctrl)) if on[5] else 0.0,
            0.0,
            0.0,
            air,
            self._leg_contacts,
            float(fell),
            0.0,
            0.0,
            0.0,
            0.0,
        ]
        if on[6]:  # dof_acc
            np.subtract(self._qd, self.last_qd, out=tmp)
            values[6] = float(np.dot(tmp, tmp)) / (dt * dt)
        if on[7]:  # action_rate
            np.subtract(self.action, self._prev_action, out=tmp)
            values[7] = float(np.dot(tmp, tmp))
        if on[11] and not moving and abs(cyaw) < 0.1:  # stand_still
            np.subtract(self._q, STAND, out=tmp)
            values[11] = float(np.abs(tmp, out=tmp).sum())
        if on[12]:  # dof_pos_limits
            below = np.minimum(self._q - self._soft_low, 0.0)
            above = np.maximum(self._q - self._soft_high, 0.0)
            values[12] = float(above.sum() - below.sum())
        if on[13]:  # base_height, above the feet
            feet_z = d.geom_xpos[self.feet, 2].mean() - self.foot_radius
            values[13] = (d.qpos[2] - feet_z - self.base_height_target) ** 2
        if on[14]:  # pose
            np.subtract(self._q, STAND, out=tmp)
            tmp *= tmp
            values[14] = math.exp(-float(np.dot(tmp, POSE_WEIGHTS)))
        weighted = np.take(values, self._term_ids) * self._weights_dt
        self._prev_action[:] = self.action
        self.episode_terms += weighted
        total = float(weighted.sum())
        if self.only_positive:
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

    def _observation(self) -> dict[str, np.ndarray]:
        d = self.data
        f32 = np.float32
        friction = self.randomizer.value("friction")
        mass = self.randomizer.value("added_mass")
        obs = {
            "base_ang_vel": d.qvel[3:6].astype(f32),
            "projected_gravity": self._g.astype(f32),
            "command": self.commands.command.astype(f32),
            "joint_pos": (self._q - STAND).astype(f32),
            "joint_vel": self._qd.astype(f32),
            "last_action": self.action.astype(f32),
            "base_lin_vel": self._v.astype(f32),
            "contacts": self.contacts.astype(f32),
            "friction": np.array([1.0 if friction is None else friction[0]], f32),
            "added_mass": np.array([0.0 if mass is None else mass[0]], f32),
            "motor_strength": self.actuator_scales[0].astype(f32),
            "height_scan": self._height_scan(),
        }
        self.noise.apply(obs, self.rngs["noise"])
        return obs

    def _height_scan(self) -> np.ndarray:
        feet = self.data.geom_xpos[self.feet]  # (4, 3)
        np.add(feet[:, None, :2], self._scan_offsets[None], out=self._scan_xy)
        self.terrain.height_at(self._scan_xy, self._scan_h)
        scan = (feet[:, 2:3] - self.foot_radius) - self._scan_h
        return scan.reshape(-1).astype(np.float32)

    def _log(self) -> dict[str, float]:
        ep = self.episode
        steps = max(1, ep["steps"])
        log = dict(zip(self._log_keys, self.episode_terms.tolist()))
        log["metrics/tracking_error_lin"] = ep["err_lin"] / steps
        log["metrics/tracking_error_yaw"] = ep["err_yaw"] / steps
        log["metrics/fall_rate"] = ep["fell"]
        if self.terrain.levels > 1:
            log["metrics/terrain_level"] = float(self.level)
        return log

    # ================================================================= exact resume
    # Episode arrays restored in place (the step reads them through these attributes).
    _STATE_ARRAYS = (
        "action",
        "_prev_action",
        "last_qd",
        "air_time",
        "last_contacts",
        "contacts",
        "episode_terms",
    )

    def state_dict(self) -> dict[str, Any]:
        """Everything an episode depends on: MuJoCo's integration state, the episode's sums and
        buffers, the curricula, every generator, and the randomized model values."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        physics = np.empty(mujoco.mj_stateSize(self.model, kind))
        mujoco.mj_getState(self.model, self.data, physics, kind)
        return {
            "physics": physics,
            "arrays": {name: getattr(self, name).copy() for name in self._STATE_ARRAYS},
            "episode": dict(self.episode),
            "level": self.level,
            "started": self.started,
            "np_random": rng_state(self.np_random),
            "rngs": {name: rng_state(g) for name, g in self.rngs.items()},
            "randomizer": self.randomizer.state_dict(),
            "commands": self.commands.state_dict(),
            "delay": self.delay.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` exactly (the model's randomized values included)."""
        kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        physics = np.asarray(state["physics"], dtype=np.float64)
        if physics.shape != (mujoco.mj_stateSize(self.model, kind),):
            raise ValueError("the saved physics state does not fit this model")
        mujoco.mj_setState(self.model, self.data, physics, kind)
        for name, value in state["arrays"].items():
            getattr(self, name)[...] = value
        self.episode = dict(state["episode"])
        self.level = int(state["level"])
        self.started = bool(state["started"])
        self.np_random.bit_generator.state = state["np_random"]
        for name, saved in state["rngs"].items():
            self.rngs[name] = set_rng_state(self.rngs[name], saved)
        self.randomizer.load_state_dict(state["randomizer"])
        self.commands.load_state_dict(state["commands"])
        self.delay.load_state_dict(state["delay"])
        # Positions for rendering; the next step recomputes everything from the state above.
        mujoco.mj_kinematics(self.model, self.data)

    # ================================================================= frames
    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            # Its GL context is made with the backend chosen when it renders first (EGL or
            # OSMesa without a display), not the one MuJoCo fixed when it was imported.
            self._renderer = OffscreenCamera(
                self.model, (self.width, self.height), self.camera_name
            )
        return self._renderer.render(self.data)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
