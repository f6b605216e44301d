"""Sim-to-real tools for any MuJoCo env: domain randomization, pushes, observation noise and
action delay, as Gymnasium wrappers (and the noise and delay parsers the quadruped tasks share;
the randomizer and its settings are `randomizer`'s).

In a config, around your own env (the first wrapper is innermost):

    env:
      id: MyRobot-v0
      wrappers:
        - name: "embodied_ppo_envs.sim2real:DomainRandomization"
          kwargs: {body: torso, friction: [0.5, 1.25], added_mass: [-1.0, 1.0],
                   push_interval_s: 8.0, push_velocity: 0.5}
        - name: "embodied_ppo_envs.sim2real:ObservationNoise"
          kwargs: {scales: {joint_vel: 1.5, imu: 0.05}}
        - name: "embodied_ppo_envs.sim2real:ActionDelay"
          kwargs: {steps: 1}

What each wrapper expects of the env (`env.unwrapped`):

- `DomainRandomization`: `model` (MjModel) and `data` (MjData); friction, mass and
  centre-of-mass terms write into the model. Motor strength and gain scales go to an
  `actuator_scales` attribute when the env has one (an array (3, nu) of [strength, kp scale,
  kd scale] that its own PD loop multiplies in, as the quadruped tasks do); otherwise every
  actuator must be a MuJoCo position actuator, whose gain, bias and force range are scaled.
  Pushes need `body` to have a free joint and use the env's `dt` (seconds per step).
- `ObservationNoise`: a Dict observation (noise per key), or a Box observation (key `obs`).
- `ActionDelay`: a Box action space.

Every draw comes from a generator of the wrapper's own, derived from the seed of
`reset(seed=...)` (numpy SeedSequence), so seeded runs repeat exactly and wrappers never
disturb each other's draws. Each wrapper has `state_dict()` / `load_state_dict()`, through
which embodied-ppo's checkpoints capture it mid-episode (including the model changes, which
MuJoCo's own state does not hold) for an exact resume.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc
from embodied_ppo_envs.randomization import ActionDelay as _Delay
from embodied_ppo_envs.randomization import ObservationNoise as _Noise
from embodied_ppo_envs.randomization import rng_state, set_rng_state, stream
from embodied_ppo_envs.randomizer import DomainRandomizer, parse_randomization
from gymnasium import spaces


def _named(exc: tc.TaskConfigError) -> tc.TaskConfigError:
    """The same error with its key in the message: a wrapper's error reaches the user as the
    message of `env.wrappers[i]`, not under its own key."""
    return tc.TaskConfigError(exc.key, f"{exc.key}: {exc.message}")


def parse_noise(value: Any, keys: list[str] | None, key: str = "noise") -> dict[str, float]:
    """Check a `noise` mapping (observation key -> scale >= 0) against the env's keys."""
    given = tc.mapping(value, key)
    if keys is not None:
        tc.unknown_names(given, keys, key)
    return {name: tc.number(scale, f"{key}.{name}", low=0.0) for name, scale in given.items()}


def parse_delay(value: Any, key: str = "action_delay") -> tuple[int, int]:
    """`k` (a delay drawn from 0..k per episode) or `[low, high]`, in policy steps."""
    if isinstance(value, (list, tuple)):
        lo, hi = tc.value_range(value, key, low=0.0)
        if not (float(lo).is_integer() and float(hi).is_integer()):
            raise tc.TaskConfigError(key, f"got {list(value)}, expected whole policy steps")
        return int(lo), int(hi)
    return 0, tc.integer(value, key, low=0, high=50)


def _mujoco_parts(env: gym.Env) -> tuple[mujoco.MjModel, mujoco.MjData]:
    inner = env.unwrapped
    model, data = getattr(inner, "model", None), getattr(inner, "data", None)
    if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
        raise TypeError(
            f"{type(inner).__name__} exposes no MuJoCo `model` and `data`: "
            "DomainRandomization needs both"
        )
    return model, data


class DomainRandomization(gym.Wrapper):
    """Randomize friction, mass, centre of mass, motor strength and PD gains at every reset,
    and push the robot at a fixed interval (see the module docstring for what the env needs).

    Args:
        body: name of the body for `added_mass`, `com_offset` and pushes (default: the first
            body after the world).
        geoms: names of the geoms whose friction is randomized (default: all).
        friction_mode: "set" or "scale" (see `Friction`).
        **terms: the ranges, as in the quadruped tasks' `randomization` kwarg: `friction`,
            `added_mass` (kg), `com_offset` (m), `motor_strength`, `kp_scale`, `kd_scale`
            (each [low, high]), `push_interval_s` and `push_velocity` (m/s).
    """

    def __init__(
        self,
        env: gym.Env,
        body: str | None = None,
        geoms: list[str] | None = None,
        friction_mode: str = "set",
        **terms: Any,
    ) -> None:
        super().__init__(env)
        model, data = _mujoco_parts(env)
        try:
            self._build(model, data, body, geoms, friction_mode, terms)
        except tc.TaskConfigError as exc:
            raise _named(exc) from None

    def _build(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        body: str | None,
        geoms: list[str] | None,
        friction_mode: str,
        terms: dict[str, Any],
    ) -> None:
        spec = parse_randomization(terms, key="")
        if friction_mode not in ("set", "scale"):
            raise tc.TaskConfigError("friction_mode", f"got {friction_mode!r}, allowed: set, scale")
        body_id = 1 if body is None else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
        if body_id < 0:
            raise tc.TaskConfigError("body", f"no body named {body!r} in the model")
        geom_ids = None
        if geoms is not None:
            geom_ids = np.array(
                [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in geoms]
            )
            if (geom_ids < 0).any():
                missing = [g for g, i in zip(geoms, geom_ids) if i < 0]
                raise tc.TaskConfigError("geoms", f"no geom named {missing[0]!r} in the model")
        scales = getattr(self.env.unwrapped, "actuator_scales", None)
        dt = float(getattr(self.env.unwrapped, "dt", model.opt.timestep))
        self.randomizer = DomainRandomizer(
            spec,
            model,
            data,
            body_id,
            dt,
            scales=scales,
            geoms=geom_ids,
            friction_mode=friction_mode,
            key="",
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.randomizer.seed(seed)
        self.randomizer.reset()
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        self.randomizer.step()
        return self.env.step(action)

    def state_dict(self) -> dict[str, Any]:
        return self.randomizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.randomizer.load_state_dict(state)


class ObservationNoise(gym.Wrapper):
    """Add noise to observations, one scale per key (a Box observation is the key `obs`).

    Args:
        scales: key -> scale in the key's units (uniform: half-width; gaussian: std).
        distribution: "uniform" or "gaussian".
    """

    def __init__(
        self, env: gym.Env, scales: dict[str, float], distribution: str = "uniform"
    ) -> None:
        super().__init__(env)
        space = env.observation_space
        self.is_dict = isinstance(space, spaces.Dict)
        keys = list(space.spaces) if self.is_dict else ["obs"]
        try:
            if distribution not in ("uniform", "gaussian"):
                raise tc.TaskConfigError(
                    "distribution", f"got {distribution!r}, allowed: uniform, gaussian"
                )
            parsed = parse_noise(scales, keys, "scales")
        except tc.TaskConfigError as exc:
            raise _named(exc) from None
        self.noise = _Noise(parsed, distribution)
        self.rng = stream(None, "noise")

    def _noisy(self, obs: Any) -> Any:
        if self.is_dict:
            obs = {k: np.array(v, copy=True) for k, v in obs.items()}
            self.noise.apply(obs, self.rng)
            return obs
        out = {"obs": np.array(obs, copy=True)}
        self.noise.apply(out, self.rng)
        return out["obs"]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        if seed is not None:
            self.rng = stream(seed, "noise")
        obs, info = self.env.reset(seed=seed, options=options)
        return self._noisy(obs), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._noisy(obs), reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return {"rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng = set_rng_state(self.rng, state["rng"])


class ActionDelay(gym.Wrapper):
    """Apply the action of k policy steps before (zeros before the episode's first), k drawn
    per episode from 0..steps (or from [low, high] when `steps` is a pair)."""

    def __init__(self, env: gym.Env, steps: int | list[int] = 1) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, spaces.Box):
            raise TypeError("ActionDelay needs a Box action space")
        try:
            low, high = parse_delay(steps, "steps")
        except tc.TaskConfigError as exc:
            raise _named(exc) from None
        self.delay = _Delay(low, high, int(np.prod(env.action_space.shape)))
        self.shape = env.action_space.shape
        self.rng = stream(None, "delay")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        if seed is not None:
            self.rng = stream(seed, "delay")
        self.delay.reset(self.rng)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        flat = np.asarray(action, dtype=np.float64).reshape(-1)
        delayed = self.delay.push(flat).reshape(self.shape).astype(self.env.action_space.dtype)
        return self.env.step(delayed)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": rng_state(self.rng), "delay": self.delay.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng = set_rng_state(self.rng, state["rng"])
        self.delay.load_state_dict(state["delay"])
