"""EmbodiedPPO/QuadrupedFlat-v0 and QuadrupedRough-v0: a Go1-class quadruped follows velocity
commands, trained with the tools that carry a policy to hardware.

The task is put together from its parts, one job each: the robot in MuJoCo and its PD loop
(`quadruped_robot`), the observation (`quadruped_observations`), the reward and the episode
log (`quadruped_rewards`), the commands (`commands`), the terrain (`terrain`) and the
sim-to-real tools (`randomizer`, `randomization`). The policy acts at 50 Hz on a PD loop of
200 Hz (see `quadruped_robot`).

Episodes end on a fall (trunk or hip on the ground, or a tilt beyond `fall_tilt`) and
are truncated by the registered time limit (1000 steps, 20 s). `info["log"]` holds, at every
step, the episode's values so far (see `quadruped_rewards`).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc
from embodied_ppo_envs.camera import OffscreenCamera
from embodied_ppo_envs.commands import CommandSpec, VelocityCommands, parse_commands
from embodied_ppo_envs.quadruped_observations import (
    ACTOR_KEYS,
    PRIVILEGED_KEYS,
    QuadrupedObservations,
    observation_space,
)
from embodied_ppo_envs.quadruped_rewards import REWARD_TERMS, QuadrupedRewards, RewardSettings
from embodied_ppo_envs.quadruped_robot import ACTION_SCALE, KD, KP, QuadrupedRobot
from embodied_ppo_envs.randomization import (
    ActionDelay,
    ObservationNoise,
    rng_state,
    set_rng_state,
    stream,
)
from embodied_ppo_envs.randomizer import DomainRandomizer, parse_randomization
from embodied_ppo_envs.sim2real import parse_delay, parse_noise
from gymnasium import spaces

# The largest |command| this robot is given (vx, vy m/s, yaw rate rad/s): a trot of a 12 kg
# robot with 0.213 m links; command ranges beyond them are refused.
COMMAND_LIMITS = (2.0, 1.0, 2.0)

DEFAULT_COMMANDS = {
    "lin_vel_x": [-1.0, 1.0],
    "lin_vel_y": [-0.6, 0.6],
    "yaw_rate": [-1.0, 1.0],
    "resample_s": 10.0,
    "stand_prob": 0.1,
    "zero_prob": [0.0, 0.0, 0.0],
    "curriculum": None,
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

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": 50,
        # What a training's progress line shows beside the return (mean of the last 100
        # episodes of each info["log"] key): how well the robot tracks its commands, and falls.
        "progress_metrics": {
            "metrics/tracking_error_lin": "velocity error {:.3f} m/s",
            "metrics/tracking_error_yaw": "yaw rate error {:.3f} rad/s",
            "metrics/fall_rate": "falls {:.0%}",
            "metrics/terrain_level": "terrain level {:.1f}",
        },
    }

    def __init__(
        self,
        *,
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
        sigma = tc.number(tracking_sigma, "tracking_sigma", low=1e-6)
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
        fall_cos = math.cos(tc.number(fall_tilt, "fall_tilt", 0.0, math.pi))
        if not isinstance(fall_contacts, (list, tuple)):
            raise tc.TaskConfigError("fall_contacts", f"got {fall_contacts!r}, expected a list")
        tc.unknown_names(fall_contacts, ("trunk", "hip", "thigh", "calf"), "fall_contacts")
        reward_settings = RewardSettings(
            weights=weights,
            tracking_sigma=sigma,
            only_positive=bool(only_positive_rewards),
            fall_cos=fall_cos,
            base_height_target=tc.number(base_height_target, "base_height_target", 0.1, 0.4),
            air_time_target=tc.number(air_time_target, "air_time_target", 0.0, 2.0),
        )
        if terrain not in ("flat", "rough"):
            raise tc.TaskConfigError("terrain", f"got {terrain!r}, allowed: flat, rough")
        if terrain == "flat" and terrain_options:
            raise tc.TaskConfigError("terrain_options", "only the rough terrain has options")

        # ------------------------------------------------------------- the parts
        self.robot = QuadrupedRobot(terrain, terrain_options, tuple(fall_contacts))
        r = self.robot
        self.model, self.data, self.dt, self.terrain = r.model, r.data, r.dt, r.terrain
        self.trunk, self.actuator_scales = r.trunk, r.actuator_scales
        # The randomizer writes the motors' [strength, kp scale, kd scale] that the PD loop
        # multiplies in.
        self.randomizer = DomainRandomizer(
            spec, self.model, self.data, self.trunk, self.dt, scales=self.actuator_scales
        )
        self.rewards = QuadrupedRewards(reward_settings, self.dt)
        self.observations = QuadrupedObservations(r, self.randomizer)
        self.noise = ObservationNoise(noise_scales, noise_distribution)
        self.delay = ActionDelay(delay[0], delay[1], 12)
        self.commands = VelocityCommands(self.command_spec, self.dt)
        self.rngs = {name: stream(None, name) for name in ("commands", "noise", "delay", "terrain")}
        self.observation_space = observation_space()
        # Policies rarely leave +-5: that is +-1.25 rad from the standing pose at scale 0.25.
        self.action_space = spaces.Box(-5.0, 5.0, (12,), np.float32)

        # Episode state (saved by state_dict).
        self.action = np.zeros(12)  # the policy's last action (clipped to the action space)
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
        x, y, z = self.terrain.spawn(self.level, self.rngs["terrain"])
        yaw = self.np_random.uniform(-math.pi, math.pi)
        self.robot.place((x, y, z), yaw, self.np_random)
        self.commands.reset(self.rngs["commands"])
        self.delay.reset(self.rngs["delay"])
        self.action[:] = 0.0
        self.rewards.reset(x, y)
        self.robot.sense()
        return self._observation(), {"log": self._log()}

    def _end_episode(self) -> None:
        """Curricula learn from the episode that just ended."""
        ep = self.rewards.episode
        steps = max(1, ep["steps"])
        fell = ep["fell"] > 0.0
        self.commands.end_episode(ep["err_lin"] / steps, fell)
        d = self.data
        walked = math.hypot(d.qpos[0] - ep["start_x"], d.qpos[1] - ep["start_y"])
        self.level = self.terrain.next_level(self.level, walked, ep["path"], ep["commanded"], fell)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        # Clipped to the action space (minimum/maximum: np.clip's float32 -> float64 path is slow).
        np.maximum(np.minimum(action, 5.0, out=self.action), -5.0, out=self.action)
        applied = self.delay.push(self.action)
        self.randomizer.step()  # a push, when one is due
        self.robot.drive(applied, self.action_scale, self.kp, self.kd)
        self.robot.sense()
        reward, fell = self.rewards.step(self.robot, self.action, self.commands.command)
        self.commands.step(self.rngs["commands"])
        self.robot.last_qd[:] = self.robot.qd
        return self._observation(), reward, fell, False, {"log": self._log()}

    def _observation(self) -> dict[str, np.ndarray]:
        obs = self.observations.read(self.commands.command, self.action)
        self.noise.apply(obs, self.rngs["noise"])
        return obs

    def _log(self) -> dict[str, float]:
        return self.rewards.log(self.level if self.terrain.levels > 1 else None)

    # ================================================================= exact resume
    def _state_arrays(self) -> dict[str, np.ndarray]:
        """The episode's arrays, restored in place (the parts read them where they are), by
        the names the saved states use."""
        r, w = self.robot, self.rewards
        return {
            "action": self.action,
            "_prev_action": w.prev_action,
            "last_qd": r.last_qd,
            "air_time": w.air_time,
            "last_contacts": r.last_contacts,
            "contacts": r.contacts,
            "episode_terms": w.episode_terms,
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything an episode depends on: MuJoCo's integration state, the episode's sums and
        buffers, the curricula, every generator, and the randomized model values."""
        return {
            "physics": self.robot.physics_state(),
            "arrays": {name: a.copy() for name, a in self._state_arrays().items()},
            "episode": dict(self.rewards.episode),
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
        self.robot.set_physics_state(state["physics"])
        arrays = self._state_arrays()
        for name, value in state["arrays"].items():
            arrays[name][...] = value
        self.rewards.episode = dict(state["episode"])
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
