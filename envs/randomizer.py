"""The domain randomizer of one MuJoCo env: its settings, checked (`parse_randomization`), and
the terms of `randomization` drawn at every episode start and written where they act.

The quadruped tasks build one from their `randomization` argument; the
`sim2real.DomainRandomization` wrapper builds one around any MuJoCo env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc
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
        *,
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
