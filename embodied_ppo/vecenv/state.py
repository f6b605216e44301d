"""Capture and restore the mid-episode state of Gymnasium environments, for exact resume.

A vector env's member is a stack of wrappers around one env. Its state is captured layer by layer:

- plain attributes (numbers, strings, None, numeric numpy arrays and scalars, and lists, tuples
  and dicts of them): the TimeLimit counter, OrderEnforcing / PassiveEnvChecker flags,
  classic-control `state`, `steps_beyond_terminated`, ...;
- random generators (`np.random.Generator`, `np.random.RandomState`): their bit-generator state,
  so resets after the resume draw the same initial states;
- MuJoCo `MjData`: the full integration state (`mj_getState` with `mjSTATE_INTEGRATION`: time,
  qpos, qvel, act, warm-start accelerations, controls, applied forces, mocap, user data, plugin
  state) plus the kinematic and force quantities the last `mj_step` left behind, which env code
  reads before its next step (e.g. body positions for a forward reward);
- a layer whose class defines `state_dict()` / `load_state_dict()` is captured through them.

Spaces, specs, models and renderers hold no episode state and are skipped. Any other attribute
type makes the env "not capturable": its state could hide in it, so resume falls back to fresh,
seeded episodes instead of pretending to be exact.

Captured states use numpy (they cross process pipes for the async backend); `to_checkpoint` /
`from_checkpoint` convert them to tensors and plain values (checkpoints load with
weights_only=True).
"""

from __future__ import annotations

import copy
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np
import torch

from embodied_ppo.core.text import first_line
from embodied_ppo.io.render import gl_failure_hint

if TYPE_CHECKING:
    from mujoco import MjData, MjModel

# Attributes with no effect on what the env returns: render handles, construction arguments and
# the env checker's copy of the last observation (it only feeds a one-time warning).
_SKIPPED_NAMES = frozenset(
    {
        "env",
        "spec",
        "_cached_spec",
        "metadata",
        "_metadata",
        "_saved_kwargs",
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "render_mode",
        "screen",
        "clock",
        "viewer",
        "mujoco_renderer",
        "_previous_data",
    }
)


# MjData fields computed by mj_step from the integration state; the next mj_step recomputes them
# before use, but env code may read them between steps (e.g. Ant's torso xpos, Humanoid's
# center of mass), so they are restored exactly rather than recomputed from the new state.
_MJ_DERIVED = (
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "light_xpos",
    "light_xdir",
    "subtree_com",
    "cdof",
    "cinert",
    "cvel",
    "cdof_dot",
    "cacc",
    "cfrc_int",
    "cfrc_ext",
    "subtree_linvel",
    "subtree_angmom",
    "ten_length",
    "ten_velocity",
    "actuator_length",
    "actuator_velocity",
    "actuator_force",
    "qfrc_bias",
    "qfrc_passive",
    "qfrc_actuator",
    "qfrc_smooth",
    "qacc_smooth",
    "qfrc_constraint",
    "qacc",
    "sensordata",
    "energy",
)


class NotCapturable(Exception):
    """The env keeps state this module cannot see; the message says where."""


class EnvFailure(RuntimeError):
    """An env raised in step or reset; the message names the env index and the error.

    Constructed from one string so the async backend can re-raise it in the main process.
    """


def _mujoco() -> ModuleType:
    """The mujoco module."""
    # In the function: MuJoCo reads MUJOCO_GL when first imported, which must wait for the
    # headless backend's choice; an env that holds MuJoCo data has imported it already.
    import mujoco

    return mujoco


def _is_plain(value: object) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuf"
    if isinstance(value, np.generic):
        return value.dtype.kind in "biuf"
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _is_stateless(value: object) -> bool:
    """Objects that belong to the env's definition or its display, not to its episode."""
    if isinstance(value, (gym.Space, gym.envs.registration.EnvSpec)):
        return True
    cls = type(value)
    # A model, or a renderer (its scene is rebuilt from MjData at every frame).
    return cls.__module__.startswith("mujoco") and cls.__name__ in ("MjModel", "Renderer")


def _layers(env: gym.Env) -> list[gym.Env]:
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _has_hook(layer: gym.Env) -> bool:
    # Looked up on the class: gymnasium wrappers do not forward attributes, and an instance
    # attribute of that name would not be a method.
    return callable(getattr(type(layer), "state_dict", None)) and callable(
        getattr(type(layer), "load_state_dict", None)
    )


def _find_model(layer: gym.Env) -> MjModel:
    for value in vars(layer).values():
        if type(value).__name__ == "MjModel":
            return value
    raise NotCapturable(f"{type(layer).__name__} holds MjData without its MjModel")


def _capture_mjdata(layer: gym.Env, data: MjData) -> dict[str, Any]:
    mujoco = _mujoco()
    model = _find_model(layer)
    if model.opt.enableflags & int(mujoco.mjtEnableBit.mjENBL_SLEEP):
        # Sleeping bodies are not part of MuJoCo's documented state.
        raise NotCapturable(f"{type(layer).__name__} enables MuJoCo sleeping")
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
    mujoco.mj_getState(model, data, state, spec)
    derived = {name: np.array(getattr(data, name), copy=True) for name in _MJ_DERIVED}
    return {"integration": state, "derived": derived}


def _restore_mjdata(layer: gym.Env, data: MjData, saved: dict[str, Any]) -> None:
    mujoco = _mujoco()
    model = _find_model(layer)
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state = np.ascontiguousarray(saved["integration"], dtype=np.float64)
    if state.shape != (mujoco.mj_stateSize(model, spec),):
        raise NotCapturable("saved MuJoCo state does not fit this model")
    for name, value in saved["derived"].items():
        target = getattr(data, name)
        if target.shape != value.shape:
            raise NotCapturable(f"saved MuJoCo field {name} does not fit this model")
    mujoco.mj_setState(model, data, state, spec)
    for name, value in saved["derived"].items():
        getattr(data, name)[...] = value


def _capture_layer(layer: gym.Env) -> dict[str, Any]:
    if _has_hook(layer):
        state = layer.state_dict()
        if not _is_plain(state):
            raise NotCapturable(f"{type(layer).__name__}.state_dict() returned non-plain data")
        return {"hook": copy.deepcopy(state)}
    attrs: dict[str, Any] = {}
    for name, value in vars(layer).items():
        if name in _SKIPPED_NAMES or _is_stateless(value):
            continue
        if isinstance(value, np.random.Generator):
            attrs[name] = {"generator": copy.deepcopy(value.bit_generator.state)}
        elif isinstance(value, np.random.RandomState):
            attrs[name] = {"random_state": value.get_state(legacy=False)}
        elif type(value).__name__ == "MjData":
            attrs[name] = {"mjdata": _capture_mjdata(layer, value)}
        elif _is_plain(value):
            attrs[name] = {"value": copy.deepcopy(value)}
        else:
            raise NotCapturable(f"{type(layer).__name__}.{name} is a {type(value).__name__}")
    return {"attrs": attrs}


def _restore_layer(layer: gym.Env, saved: dict[str, Any]) -> None:
    if "hook" in saved:
        layer.load_state_dict(copy.deepcopy(saved["hook"]))
        return
    for name, entry in saved["attrs"].items():
        current = vars(layer).get(name)
        if "generator" in entry:
            state = entry["generator"]
            if not isinstance(current, np.random.Generator):
                bit_generator = getattr(np.random, state["bit_generator"])()
                current = np.random.Generator(bit_generator)
                setattr(layer, name, current)
            current.bit_generator.state = copy.deepcopy(state)
        elif "random_state" in entry:
            if not isinstance(current, np.random.RandomState):
                current = np.random.RandomState()
                setattr(layer, name, current)
            current.set_state(entry["random_state"])
        elif "mjdata" in entry:
            if type(current).__name__ != "MjData":
                raise NotCapturable(f"{type(layer).__name__}.{name} is not MjData")
            _restore_mjdata(layer, current, entry["mjdata"])
        else:
            setattr(layer, name, copy.deepcopy(entry["value"]))


def capture_env(env: gym.Env) -> dict[str, Any]:
    """The state of `env` and every wrapper around it; raises NotCapturable when unsure."""
    layers = _layers(env)
    return {
        "classes": [type(layer).__qualname__ for layer in layers],
        "layers": [_capture_layer(layer) for layer in layers],
    }


def restore_env(env: gym.Env, state: dict[str, Any]) -> None:
    """Put `env` back into a state from `capture_env`; raises NotCapturable on a mismatch.

    The layers are checked before anything is written, so a mismatch leaves `env` untouched.
    """
    layers = _layers(env)
    classes = [type(layer).__qualname__ for layer in layers]
    if classes != list(state["classes"]):
        raise NotCapturable(
            f"saved wrapper stack {list(state['classes'])} differs from this one {classes}"
        )
    for layer, saved in zip(layers, state["layers"]):
        _restore_layer(layer, saved)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {Path(last.filename).name}:{last.lineno})"


class TrackedEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Outermost wrapper of every vector-env member.

    Names failures with the member's index and gives the vector env's `call` a way to capture
    and restore the member's state, in this process or in an async worker. It records its
    constructor arguments, so the member's spec can recreate it (as Gymnasium's tools do).
    """

    def __init__(self, env: gym.Env, index: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, index=index)
        gym.Wrapper.__init__(self, env)
        self.index = index

    def _failure(self, where: str, exc: Exception) -> EnvFailure:
        hint = gl_failure_hint(exc)  # an env that renders, where no OpenGL context could be made
        return EnvFailure(
            f"environment {self.index} raised {type(exc).__name__} in {where}: "
            f"{first_line(exc)}{_where(exc)}" + (f"; {hint}" if hint else "")
        )

    def step(
        self, action: np.ndarray | int
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The env's step; what it raises becomes an EnvFailure naming this member."""
        try:
            return self.env.step(action)
        except Exception as exc:
            raise self._failure("step", exc) from exc

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """The env's reset; what it raises becomes an EnvFailure naming this member."""
        try:
            return self.env.reset(**kwargs)
        except Exception as exc:
            raise self._failure("reset", exc) from exc

    # Set through the vector env's set_attr (one value per member), then applied by
    # embodied_ppo_apply_state through its call.
    embodied_ppo_pending_state: dict[str, Any] | None = None

    # Both methods return instead of raising: an exception inside an async worker ends it.
    def embodied_ppo_get_state(self) -> dict[str, Any]:
        """{"state": the captured env} or {"reason": why it cannot be captured}."""
        try:
            return {"state": capture_env(self.env)}
        except NotCapturable as exc:
            return {"reason": str(exc)}

    def embodied_ppo_apply_state(self) -> str | None:
        """Restore the state set_attr left in `embodied_ppo_pending_state`; returns why that
        failed, or None."""
        state, self.embodied_ppo_pending_state = self.embodied_ppo_pending_state, None
        if state is None:
            return "no state was sent"
        try:
            restore_env(self.env, state)
        except NotCapturable as exc:
            return str(exc)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None


# ------------------------------------------------------------------ checkpoint representation
_ARRAY, _SCALAR = "__ndarray__", "__npscalar__"


def to_checkpoint(value: Any) -> Any:
    """numpy arrays and scalars -> tagged tensors; everything else stays plain."""
    if isinstance(value, np.ndarray):
        return {_ARRAY: torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, np.generic):
        return {_SCALAR: torch.from_numpy(np.array(value))}
    if isinstance(value, dict):
        return {k: to_checkpoint(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_checkpoint(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_checkpoint(v) for v in value)
    return value


def from_checkpoint(value: Any) -> Any:
    """The inverse of `to_checkpoint`: tensors back to numpy with their dtype."""
    if isinstance(value, dict):
        if len(value) == 1 and _ARRAY in value:
            return value[_ARRAY].numpy().copy()
        if len(value) == 1 and _SCALAR in value:
            return value[_SCALAR].numpy()[()]
        return {k: from_checkpoint(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_checkpoint(v) for v in value]
    if isinstance(value, tuple):
        return tuple(from_checkpoint(v) for v in value)
    return value
