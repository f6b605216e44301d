"""Sim-to-real components: what is randomized, drawn and remembered, independent of any task.

Each component changes one thing, draws from a generator of its own and can restore itself
exactly: `state_dict()` returns plain numbers, lists, arrays and the generator's state, and
`load_state_dict()` puts them back (re-applying any change to the MuJoCo model, which the
package's state capture does not hold). The quadruped tasks build themselves from these, and
the wrappers of `sim2real` apply them to any MuJoCo env.

Generators: `stream(seed, name)` derives one per component from the reset seed with numpy's
SeedSequence, so turning one component on or off never changes another's draws.
"""

from __future__ import annotations

import zlib
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs.taskconfig import TaskConfigError


def stream(seed: int | None, name: str) -> np.random.Generator:
    """The generator of component `name` for reset seed `seed` (None: fresh OS entropy)."""
    if seed is None:
        return np.random.default_rng()
    # A stable number per name (Python's hash() is salted per process).
    key = zlib.crc32(name.encode())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(key,))))


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A generator's state as plain data."""
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> np.random.Generator:
    """`rng` with `state` (a new generator if the kind of bit generator differs)."""
    if type(rng.bit_generator).__name__ != state["bit_generator"]:
        rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
    rng.bit_generator.state = state
    return rng


class ModelTerm:
    """A per-episode draw written into the MuJoCo model (friction, mass, centre of mass).

    Subclasses set `size` (numbers drawn per episode) and define `_write(model, value)`.
    """

    name = ""
    size = 1

    def __init__(self, low: np.ndarray, high: np.ndarray, neutral: np.ndarray) -> None:
        self.low = np.asarray(low, dtype=np.float64)
        self.high = np.asarray(high, dtype=np.float64)
        self.value = np.asarray(neutral, dtype=np.float64).copy()  # the current draw

    def draw(self, model: mujoco.MjModel, rng: np.random.Generator) -> None:
        """Draw this episode's value and write it into `model`."""
        self.value = rng.uniform(self.low, self.high)
        self._write(model, self.value)

    def _write(self, model: mujoco.MjModel, value: np.ndarray) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value.copy()}

    def load_state_dict(self, model: mujoco.MjModel, state: dict[str, Any]) -> None:
        self.value = np.asarray(state["value"], dtype=np.float64).copy()
        self._write(model, self.value)


class Friction(ModelTerm):
    """Sliding friction of `geoms`: set to the drawn coefficient, or their own scaled by it.

    MuJoCo uses the larger coefficient of two touching geoms, so in "set" mode give every geom
    that touches the ground (the default: all geoms) to make the draw the contacts' friction.
    """

    name = "friction"

    def __init__(
        self,
        model: mujoco.MjModel,
        low: float,
        high: float,
        geoms: np.ndarray | None = None,
        mode: str = "set",
    ) -> None:
        self.geoms = np.arange(model.ngeom) if geoms is None else np.asarray(geoms)
        self.nominal = model.geom_friction[self.geoms, 0].copy()
        self.mode = mode
        neutral = 1.0 if mode == "scale" else float(self.nominal.max())
        super().__init__(np.array([low]), np.array([high]), np.array([neutral]))

    def _write(self, model: mujoco.MjModel, value: np.ndarray) -> None:
        if self.mode == "scale":
            model.geom_friction[self.geoms, 0] = self.nominal * value[0]
        else:
            model.geom_friction[self.geoms, 0] = value[0]


class AddedMass(ModelTerm):
    """A payload of the drawn mass (kg, may be negative) at `body`'s centre of mass: its mass
    changes by the draw, its inertia about the centre of mass does not."""

    name = "added_mass"

    def __init__(
        self,
        model: mujoco.MjModel,
        low: float,
        high: float,
        body: int,
        key: str = "randomization.added_mass",
    ) -> None:
        self.body = body
        self.nominal = float(model.body_mass[body])
        if self.nominal + low <= 0.0:
            raise TaskConfigError(
                key,
                f"got a low end of {low:g} kg, but the body weighs {self.nominal:g} kg: "
                "its mass must stay positive",
            )
        super().__init__(np.array([low]), np.array([high]), np.zeros(1))

    def _write(self, model: mujoco.MjModel, value: np.ndarray) -> None:
        model.body_mass[self.body] = self.nominal + value[0]


class ComOffset(ModelTerm):
    """`body`'s centre of mass moved by the drawn (x, y, z) offset (metres, body frame)."""

    name = "com_offset"
    size = 3

    def __init__(self, model: mujoco.MjModel, low: np.ndarray, high: np.ndarray, body: int) -> None:
        self.body = body
        self.nominal = model.body_ipos[body].copy()
        super().__init__(low, high, np.zeros(3))

    def _write(self, model: mujoco.MjModel, value: np.ndarray) -> None:
        model.body_ipos[self.body] = self.nominal + value


class Actuation:
    """Motor strength (per motor) and PD gain scales (one kp and one kd scale per episode).

    Writes into `scales`, an array (3, n) of [strength, kp scale, kd scale] per motor that a
    Python PD loop multiplies in: torque = strength * clip(kp*kp_scale*(target - q)
    - kd*kd_scale*qd, limits). For MuJoCo position actuators use `PositionActuators`, which
    turns the same scales into gain, bias and force-range parameters.
    """

    def __init__(
        self,
        scales: np.ndarray,
        strength: tuple[float, float] | None,
        kp: tuple[float, float] | None,
        kd: tuple[float, float] | None,
    ) -> None:
        self.scales = scales  # (3, n), shared with whoever applies it
        self.ranges = [strength, kp, kd]

    def draw(self, rng: np.random.Generator) -> None:
        n = self.scales.shape[1]
        for row, bounds in enumerate(self.ranges):
            if bounds is None:
                continue
            # One draw per motor for the strength, one for all motors for each gain scale.
            size = n if row == 0 else 1
            self.scales[row] = rng.uniform(bounds[0], bounds[1], size)

    def state_dict(self) -> dict[str, Any]:
        return {"scales": self.scales.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scales[...] = state["scales"]


class PositionActuators:
    """Applies [strength, kp scale, kd scale] per actuator to MuJoCo position actuators
    (gaintype fixed, biastype affine: force = kp*ctrl - kp*q - kd*qd, clipped to forcerange).

    Strength scales the gain, the bias and the force range together (a weaker motor, same
    target); the gain scales multiply kp (gainprm[0], -biasprm[1]) and kd (-biasprm[2]).
    """

    def __init__(self, model: mujoco.MjModel, key: str = "randomization.motor_strength") -> None:
        fixed = int(mujoco.mjtGain.mjGAIN_FIXED)
        affine = int(mujoco.mjtBias.mjBIAS_AFFINE)
        if model.nu == 0 or not (
            np.all(model.actuator_gaintype == fixed) and np.all(model.actuator_biastype == affine)
        ):
            raise TaskConfigError(
                key,
                "the env has no Python PD loop (an `actuator_scales` attribute) and its "
                "actuators are not all MuJoCo position actuators (gain fixed, bias affine)",
            )
        self.kp = model.actuator_gainprm[:, 0].copy()
        self.kd = -model.actuator_biasprm[:, 2].copy()
        self.forcerange = model.actuator_forcerange.copy()

    def apply(self, model: mujoco.MjModel, scales: np.ndarray) -> None:
        strength, kp, kd = scales
        model.actuator_gainprm[:, 0] = self.kp * kp * strength
        model.actuator_biasprm[:, 1] = -self.kp * kp * strength
        model.actuator_biasprm[:, 2] = -self.kd * kd * strength
        model.actuator_forcerange[:] = self.forcerange * strength[:, None]


class Pushes:
    """Velocity kicks of a free-floating body: every `interval` steps (policy steps) its
    horizontal velocity gets a uniform draw in [-velocity, velocity] per axis added."""

    def __init__(self, interval: int, velocity: float, dof: int) -> None:
        self.interval = interval
        self.velocity = velocity
        self.dof = dof  # address of the free joint's first (linear x) velocity
        self.steps = 0  # policy steps since the episode began
        self.last = np.zeros(2)  # the last kick (for tests and logs)

    def reset(self) -> None:
        self.steps = 0
        self.last = np.zeros(2)

    def step(self, data: mujoco.MjData, rng: np.random.Generator) -> bool:
        """Count a policy step; kick `data` when the interval is reached. True when kicked."""
        self.steps += 1
        if self.interval <= 0 or self.steps % self.interval:
            return False
        self.last = rng.uniform(-self.velocity, self.velocity, 2)
        data.qvel[self.dof : self.dof + 2] += self.last
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "last": self.last.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.last = np.asarray(state["last"], dtype=np.float64).copy()


class ObservationNoise:
    """Additive noise on observation keys: uniform in [-scale, scale] or Gaussian of std
    `scale`, one scale per key (in the key's own units). One draw per step covers every
    noisy key, in the order the scales were given."""

    def __init__(self, scales: dict[str, float], distribution: str = "uniform") -> None:
        self.scales = {k: float(v) for k, v in scales.items() if float(v) > 0.0}
        self.gaussian = distribution == "gaussian"
        self._layout: list[tuple[str, slice]] | None = None

    def _plan(self, obs: dict[str, np.ndarray]) -> None:
        """Where each key's noise sits in the one draw, and its scale per entry."""
        layout, scale, start = [], [], 0
        for key, s in self.scales.items():
            size = obs[key].size
            layout.append((key, slice(start, start + size)))
            scale.append(np.full(size, s))
            start += size
        self._layout = layout
        self._scale = np.concatenate(scale) if scale else np.zeros(0)

    def apply(self, obs: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Add noise to `obs` in place (its arrays keep their dtype and shape)."""
        if not self.scales:
            return
        if self._layout is None:
            self._plan(obs)
        n = self._scale.size
        noise = rng.standard_normal(n) if self.gaussian else rng.uniform(-1.0, 1.0, n)
        noise *= self._scale
        for key, part in self._layout:
            value = obs[key]
            value += noise[part].reshape(value.shape).astype(value.dtype, copy=False)


class ActionDelay:
    """The action applied is the one given `k` policy steps before (zeros before the first);
    `k` is drawn per episode from [low, high]."""

    def __init__(self, low: int, high: int, size: int) -> None:
        self.low, self.high = low, high
        self.buffer = np.zeros((high + 1, size))  # ring buffer of the last high+1 actions
        self.head = 0  # where the newest action goes
        self.k = low

    def reset(self, rng: np.random.Generator) -> None:
        self.k = int(rng.integers(self.low, self.high + 1)) if self.high > self.low else self.low
        self.buffer[:] = 0.0
        self.head = 0

    def push(self, action: np.ndarray) -> np.ndarray:
        """Store `action`; return the action of k steps before (a view: copy to keep it)."""
        if self.high == 0:
            return action
        self.buffer[self.head] = action
        out = self.buffer[(self.head - self.k) % len(self.buffer)]
        self.head = (self.head + 1) % len(self.buffer)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.copy(), "head": self.head, "k": self.k}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer[...] = state["buffer"]
        self.head = int(state["head"])
        self.k = int(state["k"])
