"""An mjlab env's state mid-episode, as checkpoint-safe tensors (exact resume).

mjlab keeps an env's state in three places, all captured here:

* MuJoCo Warp's data: the integration state MuJoCo itself saves (`mjSTATE_INTEGRATION`: time,
  qpos, qvel, act, the solver's warm start, ctrl, applied forces, mocap poses, active
  equalities). Everything else in it is computed from these by the next step.
* MuJoCo Warp's model: the fields that domain randomization made per-env.
* The managers, the scene's entities and sensors: torch tensors (commands and their timers,
  last actions, observation histories, episode sums, contact air times, ...) and plain
  counters, found by walking their attributes.

Restoring writes every captured tensor in place (mjlab and its CUDA graphs keep pointers to
them), recomputes the derived quantities with one forward pass, and puts the warm start back as
it was. The global random generators mjlab draws from are the run's (io.rng).
"""

from __future__ import annotations

from typing import Any

import torch

from embodied_ppo.core.types import CheckpointState

# MuJoCo's integration state, as MuJoCo Warp's Data names it.
INTEGRATION_FIELDS = (
    "time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl", "qfrc_applied", "xfrc_applied",
    "mocap_pos", "mocap_quat", "eq_active",
)  # fmt: skip

# Attributes of the env that are not state: the simulation (captured through its arrays), its
# config and viewers, and what a step or reset hands back (recomputed by the next one).
_SKIP = frozenset(
    {
        "sim", "cfg", "_offline_renderer", "manager_visualizers", "metadata", "extras",
        "obs_buf", "reset_buf", "reset_terminated", "reset_time_outs", "reward_buf",
    }
)  # fmt: skip

# Plain values a walk keeps (counters and timers); containers are walked into.
_PLAIN = (bool, int, float)


def _owned(obj: object) -> bool:
    """Objects of mjlab are walked into, except its simulation's (the simulation and its torch
    views of Warp's arrays, captured through Warp)."""
    module = type(obj).__module__ or ""
    if isinstance(obj, type) or module.startswith("mjlab.sim"):
        return False
    return module.startswith("mjlab")


# Where a captured value lives: its owner (object, dict or list), its key there, the value.
Slot = tuple[Any, Any, Any]


def _walk(obj: object, path: str, out: dict[str, Slot], seen: set[int]) -> None:
    """Every tensor and plain value reachable from `obj` through mjlab objects, dicts, lists and
    tuples, by attribute path (each object once, under its first path)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, list | tuple):
        items = list(enumerate(obj))
    elif _owned(obj) and hasattr(obj, "__dict__"):
        items = [(k, v) for k, v in vars(obj).items() if not (path == "" and k in _SKIP)]
    else:
        return
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, torch.Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                out[where] = (obj, key, value)
        elif isinstance(value, _PLAIN) and not isinstance(obj, tuple):
            out[where] = (obj, key, value)
        elif key != "cfg":
            _walk(value, where, out, seen)


def _managed(env: Any) -> dict[str, Slot]:
    """The managers', entities' and sensors' tensors and plain values, by path."""
    out: dict[str, Slot] = {}
    # The simulation is captured through Warp's arrays; the config is not state.
    seen = {id(env.sim), id(env.cfg)}
    _walk(env, "", out, seen)
    return out


def _sim_arrays(env: Any) -> dict[str, torch.Tensor]:
    """MuJoCo Warp's integration-state arrays of `env` as torch tensors sharing their memory
    (empty ones, e.g. mocap poses of a scene without mocap bodies, left out)."""
    # In the function: Warp is an optional dependency (the mjlab extra).
    import warp

    data = env.sim.wp_data
    out = {}
    for name in INTEGRATION_FIELDS:
        array = getattr(data, name)
        if array.size:
            out[name] = warp.to_torch(array)
    return out


def capture(env: Any) -> CheckpointState:
    """The state of every env of mjlab's `env`, on the host (tensors and plain values)."""
    model = env.sim.model
    sim = {name: value.clone().cpu() for name, value in _sim_arrays(env).items()}
    fields = {name: getattr(model, name).clone().cpu() for name in sorted(env.sim.expanded_fields)}
    managed = {}
    for path, (_, _, value) in _managed(env).items():
        managed[path] = value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value
    return {"sim": sim, "model": fields, "managed": managed}


def restore(env: Any, state: CheckpointState) -> str | None:
    """Write `capture`'s state back into `env` (built from the same task config); returns why
    it does not fit, or None."""
    model, arrays = env.sim.model, _sim_arrays(env)
    current = _managed(env)
    saved = state["managed"]
    if set(saved) != set(current) or set(state["model"]) != set(env.sim.expanded_fields):
        return "the checkpoint's mjlab env state has other parts than this task's"
    if set(state["sim"]) != set(arrays):
        return "the checkpoint's mjlab simulation state has other arrays than this task's"
    for name, value in state["sim"].items():
        target = arrays[name]
        if tuple(target.shape) != tuple(value.shape):
            return f"the checkpoint's mjlab {name} has shape {tuple(value.shape)}"
    for path, value in saved.items():
        target = current[path][2]
        if isinstance(target, torch.Tensor) != isinstance(value, torch.Tensor) or (
            isinstance(value, torch.Tensor) and target.shape != value.shape
        ):
            return f"the checkpoint's mjlab env state differs at {path}"
    for name, value in state["model"].items():
        getattr(model, name).copy_(value)
    for name, value in state["sim"].items():
        arrays[name].copy_(value)
    for path, value in saved.items():
        owner, key, target = current[path]
        if isinstance(value, torch.Tensor):
            target.copy_(value)
        elif isinstance(owner, dict | list):
            owner[key] = value
        else:
            setattr(owner, key, value)
    env.sim.forward()  # the derived quantities of the restored state
    arrays["qacc_warmstart"].copy_(state["sim"]["qacc_warmstart"])  # as the step left it
    return None
