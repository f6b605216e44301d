"""The quadruped tasks' arguments, checked once into `TaskSettings` (every error names its key,
`TaskConfigError`), shared by the single env and the vector env of the task."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from embodied_ppo_envs import taskconfig as tc
from embodied_ppo_envs.commands import CommandSpec, parse_commands
from embodied_ppo_envs.quadruped_observations import ACTOR_KEYS, PRIVILEGED_KEYS
from embodied_ppo_envs.quadruped_rewards import REWARD_TERMS, RewardSettings
from embodied_ppo_envs.quadruped_robot import ACTION_SCALE, KD, KP, PHYSICS
from embodied_ppo_envs.randomizer import RandomizationSpec, parse_randomization
from embodied_ppo_envs.sim2real import parse_delay, parse_noise

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


@dataclass(frozen=True)
class TaskSettings:
    """The task's arguments, checked (see `QuadrupedEnv` for each one's meaning)."""

    terrain: str
    terrain_options: dict[str, Any] | None
    commands: CommandSpec
    rewards: RewardSettings
    randomization: RandomizationSpec
    noise: dict[str, float]
    noise_gaussian: bool
    delay: tuple[int, int]
    action_scale: float
    kp: float
    kd: float
    fall_contacts: tuple[str, ...]
    physics: str


def parse_settings(
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
    physics: str = "accurate",
) -> TaskSettings:
    """The task's keyword arguments, checked; raises TaskConfigError naming the key."""
    weights = tc.mapping(rewards, "rewards")
    tc.unknown_names(weights, REWARD_TERMS, "rewards")
    weights = {k: tc.number(v, f"rewards.{k}") for k, v in {**REWARD_TERMS, **weights}.items()}
    sigma = tc.number(tracking_sigma, "tracking_sigma", low=1e-6)
    command_spec = parse_commands(commands, command_schedule, COMMAND_LIMITS, DEFAULT_COMMANDS)
    spec = parse_randomization(randomization)
    if noise_distribution not in ("uniform", "gaussian"):
        raise tc.TaskConfigError(
            "noise_distribution", f"got {noise_distribution!r}, allowed: uniform, gaussian"
        )
    noise_scales = parse_noise(noise, [*ACTOR_KEYS, *PRIVILEGED_KEYS])
    delay = parse_delay(action_delay)
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
    if physics not in PHYSICS:
        raise tc.TaskConfigError("physics", f"got {physics!r}, allowed: {', '.join(PHYSICS)}")
    untouched = [c for c in fall_contacts if c in ("thigh", "calf")]
    if physics == "fast" and untouched:
        raise tc.TaskConfigError(
            "fall_contacts",
            f"got {untouched[0]!r}: under physics fast, thighs and calves do not touch the ground",
        )
    if terrain not in ("flat", "rough"):
        raise tc.TaskConfigError("terrain", f"got {terrain!r}, allowed: flat, rough")
    if terrain == "flat" and terrain_options:
        raise tc.TaskConfigError("terrain_options", "only the rough terrain has options")
    return TaskSettings(
        terrain=terrain,
        terrain_options=terrain_options,
        commands=command_spec,
        rewards=reward_settings,
        randomization=spec,
        noise={k: v for k, v in noise_scales.items() if v > 0.0},
        noise_gaussian=noise_distribution == "gaussian",
        delay=delay,
        action_scale=tc.number(action_scale, "action_scale", low=0.0),
        kp=tc.number(kp, "kp", low=0.0),
        kd=tc.number(kd, "kd", low=0.0),
        fall_contacts=tuple(fall_contacts),
        physics=physics,
    )
