"""Sim-to-real tools for any MuJoCo env: domain randomization, pushes, observation noise and
action delay, as Gymnasium wrappers (and the settings parsers the quadruped tasks share).

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

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc
from embodied_ppo_envs.randomization import (
    ActionDelay as _Delay,
)
from embodied_ppo_envs.randomization import (
    Actuation,
    AddedMass,
    ComOffset,
    Friction,
    PositionActuators,
    Pushes,
    rng_state,
    set_rng_state,
    stream,
)
from embodied_ppo_envs.randomization import (
    ObservationNoise as _Noise,
)
from gymnasium import spaces

RANDOMIZATION_TERMS = (
    "friction",
    "added_mass",
    "com_offset",
    "motor_strength",
    "kp_scale",
    "kd_scale",
    "push_interval_s",
    "push_velocity",
)


@dataclass(frozen=True)
class RandomizationSpec:
    """Validated randomization settings; None turns a term off."""

    friction: tuple[float, float] | None = None
    added_mass: tuple[float, float] | None = None
    com_offset: tuple[tuple[float, float], ...] | None = None  # (x, y, z) ranges, metres
    motor_strength: tuple[float, float] | None = None
    kp_scale: tuple[float, float] | None = None
    kd_scale: tuple[float, float] | None = None
    push_interval_s: float | None = None
    push_velocity: float = 0.0

    @property
    def actuation(self) -> bool:
        return any(r is not None for r in (self.motor_strength, self.kp_scale, self.kd_scale))


def parse_randomization(value: Any, key: str = "randomization") -> RandomizationSpec:
    """Check a `randomization` mapping (term -> range); raises TaskConfigError naming the key
    (`key.term`, or the term alone when `key` is empty)."""

    def at(name: str) -> str:
        return f"{key}.{name}" if key else name

    given = tc.mapping(value, key or "randomization")
    tc.unknown_names(given, RANDOMIZATION_TERMS, key)
    out: dict[str, Any] = {}
    for name, low in (
        ("friction", 0.0),
        ("added_mass", None),
        ("motor_strength", 0.0),
        ("kp_scale", 0.0),
        ("kd_scale", 0.0),
    ):
        if given.get(name) is not None:
            out[name] = tc.value_range(given[name], at(name), low=low)
    com = given.get("com_offset")
    if com is not None:
        # [low, high] for every axis, or one range per axis.
        if isinstance(com, (list, tuple)) and len(com) == 3:
            out["com_offset"] = tuple(
                tc.value_range(r, f"{at('com_offset')}[{i}]") for i, r in enumerate(com)
            )
        else:
            out["com_offset"] = (tc.value_range(com, at("com_offset")),) * 3
    if given.get("push_interval_s") is not None:
        out["push_interval_s"] = tc.number(given["push_interval_s"], at("push_interval_s"), low=0)
        if out["push_interval_s"] == 0.0:
            raise tc.TaskConfigError(at("push_interval_s"), "got 0, expected seconds > 0")
    if given.get("push_velocity") is not None:
        out["push_velocity"] = tc.number(given["push_velocity"], at("push_velocity"), low=0.0)
        if "push_interval_s" not in out and out["push_velocity"] > 0:
            raise tc.TaskConfigError(
                at("push_velocity"), "pushes need push_interval_s (seconds between pushes)"
            )
    return RandomizationSpec(**out)


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


class DomainRandomizer:
    """The randomization terms of one env, drawn at every episode start.

    Args:
        spec: the terms (see `parse_randomization`).
        model, data: the env's MuJoCo model and data.
        body: the body that gets added mass, centre-of-mass offsets and pushes.
        dt: seconds per policy step (pushes are counted in policy steps).
        scales: an array (3, nu) [strength, kp scale, kd scale] for a Python PD loop, or None
            for MuJoCo position actuators.
        geoms: the geoms whose friction is randomized (default: all).
        friction_mode: "set" (the draw is the coefficient) or "scale" (it multiplies theirs).
        key: where the terms sit in the task's arguments (errors name `key.term`; "": the
            term alone).
    """

    def __init__(
        self,
        spec: RandomizationSpec,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        body: int,
        dt: float,
        scales: np.ndarray | None = None,
        geoms: np.ndarray | None = None,
        friction_mode: str = "set",
        key: str = "randomization",
    ) -> None:
        self.spec, self.model, self.data = spec, model, data

        def at(name: str) -> str:
            return f"{key}.{name}" if key else name

        self.terms: list[Any] = []
        if spec.friction is not None:
            self.terms.append(Friction(model, *spec.friction, geoms=geoms, mode=friction_mode))
        if spec.added_mass is not None:
            self.terms.append(AddedMass(model, *spec.added_mass, body, at("added_mass")))
        if spec.com_offset is not None:
            low = np.array([r[0] for r in spec.com_offset])
            high = np.array([r[1] for r in spec.com_offset])
            self.terms.append(ComOffset(model, low, high, body=body))
        self.position_actuators = None
        if scales is None:
            scales = np.ones((3, model.nu))
            if spec.actuation:
                self.position_actuators = PositionActuators(model, at("motor_strength"))
        self.actuation = Actuation(scales, spec.motor_strength, spec.kp_scale, spec.kd_scale)
        self.pushes = None
        if spec.push_interval_s is not None:
            if model.jnt_type[model.body_jntadr[body]] != mujoco.mjtJoint.mjJNT_FREE:
                raise tc.TaskConfigError(
                    at("push_interval_s"),
                    f"pushes need a free joint on body {model.body(body).name!r}",
                )
            interval = max(1, round(spec.push_interval_s / dt))
            dof = int(model.jnt_dofadr[model.body_jntadr[body]])
            self.pushes = Pushes(interval, spec.push_velocity, dof)
        # One generator per term: turning a term on or off leaves the others' draws alone.
        names = [t.name for t in self.terms] + ["actuation", "push"]
        self.rngs = {name: stream(None, name) for name in names}

    def seed(self, seed: int | None) -> None:
        """New generators from a reset seed (None: keep drawing from the current ones)."""
        if seed is not None:
            self.rngs = {name: stream(seed, f"randomization.{name}") for name in self.rngs}

    def reset(self) -> None:
        """Draw this episode's values and write them where they act."""
        for term in self.terms:
            term.draw(self.model, self.rngs[term.name])
        if self.spec.actuation:
            self.actuation.draw(self.rngs["actuation"])
            if self.position_actuators is not None:
                self.position_actuators.apply(self.model, self.actuation.scales)
        if self.pushes is not None:
            self.pushes.reset()

    def step(self) -> bool:
        """Count a policy step (before the physics runs); True when a push was applied."""
        return self.pushes is not None and self.pushes.step(self.data, self.rngs["push"])

    def value(self, name: str) -> np.ndarray | None:
        """The current draw of a model term (e.g. "friction"), or None when it is off."""
        for term in self.terms:
            if term.name == name:
                return term.value
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "rngs": {k: rng_state(g) for k, g in self.rngs.items()},
            "terms": [t.state_dict() for t in self.terms],
            "actuation": self.actuation.state_dict(),
            "pushes": None if self.pushes is None else self.pushes.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, saved in state["rngs"].items():
            self.rngs[name] = set_rng_state(self.rngs[name], saved)
        for term, saved in zip(self.terms, state["terms"], strict=True):
            term.load_state_dict(self.model, saved)
        self.actuation.load_state_dict(state["actuation"])
        if self.position_actuators is not None:
            self.position_actuators.apply(self.model, self.actuation.scales)
        if self.pushes is not None:
            self.pushes.load_state_dict(state["pushes"])


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
            spec, model, data, body_id, dt, scales, geom_ids, friction_mode, key=""
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
