"""An mjlab env's state mid-episode, as checkpoint-safe tensors (exact resume).

mjlab keeps an env's state in three places, all captured here:

* MuJoCo Warp's data: the integration state MuJoCo itself saves (`mjSTATE_INTEGRATION`: time,
  qpos, qvel, act, the solver's warm start, ctrl, applied forces, mocap poses, active
  equalities). Everything else in it is computed from these by the next step.
* MuJoCo Warp's model: the fields that domain randomization made per-env.
* The managers, the scene's entities and sensors, and the objects of a user's task package
  they hold: torch tensors (commands and their timers, last actions, observation histories,
  episode sums, contact air times, ...), plain counters, numpy arrays and random generators,
  found by walking their attributes (object_state; what cannot be captured is named).

Restoring writes every captured tensor in place (mjlab and its CUDA graphs keep pointers to
them), recomputes the derived quantities with one forward pass, and puts the warm start back as
it was. The global random generators mjlab draws from are the run's (io.rng).
"""

from __future__ import annotations

from typing import Any

import torch

from embodied_ppo.core.types import CheckpointState
from embodied_ppo.vecenv import object_state
from embodied_ppo.vecenv.object_state import Slot, Walk, find

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

# mjlab's simulation (and its torch views of Warp's arrays) is captured through Warp.
_WALK = Walk(skip_root=_SKIP, skip_modules=("mjlab.sim",))


def _managed(env: Any) -> dict[str, Slot]:
    """The state of the managers, entities and sensors (and of the objects of a user's task
    package they hold), by path (object_state.find)."""
    # The simulation is captured through Warp's arrays; the config is not state.
    return find(env, _WALK, {id(env.sim), id(env.cfg)})


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
    """The state of every env of mjlab's `env`, on the host (tensors and plain values); an
    object_state.Uncapturable names a part it cannot capture."""
    model = env.sim.model
    sim = {name: value.clone().cpu() for name, value in _sim_arrays(env).items()}
    fields = {name: getattr(model, name).clone().cpu() for name in sorted(env.sim.expanded_fields)}
    return {"sim": sim, "model": fields, "managed": object_state.capture(_managed(env))}


def restore(env: Any, state: CheckpointState) -> str | None:
    """Write `capture`'s state back into `env` (built from the same task config); returns why
    it does not fit, or None."""
    model, arrays = env.sim.model, _sim_arrays(env)
    current = _managed(env)
    if set(state["model"]) != set(env.sim.expanded_fields):
        return "the checkpoint's mjlab env state has other parts than this task's"
    wrong = object_state.mismatch(current, state["managed"])
    if wrong is not None:
        return f"the checkpoint's mjlab env state has {wrong} than this task's"
    if set(state["sim"]) != set(arrays):
        return "the checkpoint's mjlab simulation state has other arrays than this task's"
    for name, value in state["sim"].items():
        target = arrays[name]
        if tuple(target.shape) != tuple(value.shape):
            return f"the checkpoint's mjlab {name} has shape {tuple(value.shape)}"
    for name, value in state["model"].items():
        getattr(model, name).copy_(value)
    for name, value in state["sim"].items():
        arrays[name].copy_(value)
    object_state.restore(current, state["managed"])
    env.sim.forward()  # the derived quantities of the restored state
    arrays["qacc_warmstart"].copy_(state["sim"]["qacc_warmstart"])  # as the step left it
    return None
