"""What a plain MuJoCo control loop needs to run a policy trained on an mjlab task, read from
the task itself: `export` writes it into the exported policy's JSON (its "mjlab" block) and
the task's MuJoCo model beside it, for examples/deploy/mjlab_velocity.py (docs/deployment.md).

Read from one env of the task as mjlab builds it (the run's env.id, env.kwargs and time limit):

* the model: mjlab's compiled scene of one world (the robot from the mjlab install with its
  actuators, collision settings and the task's physics options), saved as MuJoCo's binary
  model; the geoms that are only drawn (meshes that neither collide nor weigh) are left out of
  it when that changes none of the physics, which keeps a humanoid's model small;
* the rates: the physics time step and the decimation (physics steps per policy step);
* the observation groups the policy reads: each term's function and parameters, size, clip,
  scale, history and delay, in mjlab's order (the noise of training is not part of it);
* the actions: each action term's joints and the actuators that drive them (MuJoCo orders
  actuators its own way), scale, offset and clip;
* the robot: its joints in mjlab's order, the default pose the joint observations are relative
  to, its root body and the pose it starts an episode in; and how mjlab tells a fall.
"""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.core.types import JSONDict
from embodied_ppo.vecenv.mjlab_tasks import build, task_config

# Model fields that make the physics: equal in the model without drawn-only geoms, or the full
# model is saved.
_PHYSICS_FIELDS = (
    "body_mass", "body_inertia", "body_ipos", "body_iquat", "body_pos", "body_quat",
    "jnt_range", "dof_armature", "dof_damping", "dof_frictionloss", "actuator_gainprm",
    "actuator_biasprm", "actuator_forcerange", "actuator_ctrlrange", "actuator_trnid",
)  # fmt: skip
_GEOM_FIELDS = (
    "geom_type", "geom_size", "geom_pos", "geom_quat", "geom_friction", "geom_solref",
    "geom_solimp", "geom_condim", "geom_priority", "geom_bodyid", "geom_contype",
    "geom_conaffinity",
)  # fmt: skip


def describe(cfg: EnvConfig, groups: list[str], model_path: Path) -> JSONDict:
    """The "mjlab" block of an exported policy's JSON for the task of `cfg`, whose policy reads
    the observation `groups`; writes the task's MuJoCo model to `model_path`."""
    env = build(task_config(cfg, 1, 0), torch.device("cpu"))
    try:
        stripped = _save_model(env, model_path)
        robot = env.scene["robot"]
        model = env.sim.mj_model
        return {
            "task": str(cfg.id),
            "mjlab_version": importlib.metadata.version("mjlab"),
            "model": model_path.name,
            "model_drawn_geoms": "left out" if stripped else "kept",
            "physics_dt": float(model.opt.timestep),
            "decimation": int(env.cfg.decimation),
            "robot": _robot(env, robot),
            "observation": {g: _group(env, g, robot) for g in groups},
            "action": [_action_term(env, name) for name in env.action_manager.active_terms],
            "falls": _falls(env),
        }
    finally:
        env.close()


def _prefixed(entity: str, names: Any) -> list[str]:
    return [f"{entity}/{n}" for n in names]


def _robot(env: Any, robot: Any) -> JSONDict:
    """The robot's joints, default pose, root body and the qpos of its start pose."""
    import mujoco

    model = env.sim.mj_model
    qpos = np.array(model.qpos0, dtype=np.float64)
    root = robot.data.default_root_state[0].cpu().numpy().astype(np.float64)  # pos, quat, vels
    free = robot.indexing.free_joint_q_adr.cpu().numpy()
    if free.size:
        qpos[free] = root[:7]
    joints = _prefixed("robot", robot.joint_names)
    default = robot.data.default_joint_pos[0].cpu().numpy().astype(np.float64)
    for name, value in zip(joints, default, strict=True):
        qpos[model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)]] = value
    return {
        "joints": joints,
        "default_joint_pos": default.tolist(),
        "root_body": model.body(int(robot.indexing.root_body_id)).name,
        "init_qpos": qpos.tolist(),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return repr(value)


def _term_scale(scale: Any, dim: int) -> list[float] | None:
    if scale is None:
        return None
    values = torch.as_tensor(scale, dtype=torch.float64).reshape(-1).tolist()
    return values * dim if len(values) == 1 else values


def _group(env: Any, group: str, robot: Any) -> JSONDict:
    """One observation group: its terms in order, what each computes and how it is shaped."""
    manager = env.observation_manager
    cfgs = manager._group_obs_term_cfgs[group]
    terms = []
    for name, cfg, dim in zip(
        manager.active_terms[group], cfgs, manager.group_obs_term_dim[group], strict=True
    ):
        params = {k: v for k, v in cfg.params.items() if k != "asset_cfg"}
        asset = cfg.params.get("asset_cfg")
        if asset is not None and hasattr(asset, "joint_ids"):
            ids = asset.joint_ids
            names = (
                robot.joint_names if isinstance(ids, slice) else [robot.joint_names[i] for i in ids]
            )
            params["joints"] = _prefixed(asset.name, names)
        if cfg.func.__name__ in ("joint_pos_rel", "joint_vel_rel") and "joints" not in params:
            params["joints"] = _prefixed("robot", robot.joint_names)
        if cfg.func.__name__ == "generated_commands":
            term = env.command_manager.get_term(cfg.params["command_name"])
            params["command_kind"] = type(term).__name__
        size = int(math.prod(dim))
        base = size // cfg.history_length if cfg.history_length > 0 else size
        terms.append(
            {
                "name": name,
                "function": cfg.func.__name__,
                "params": _jsonable(params),
                "dim": size,
                "clip": _jsonable(cfg.clip),
                "scale": _term_scale(cfg.scale, base),
                "history_length": int(cfg.history_length),
                "delay_max_lag": int(getattr(cfg, "delay_max_lag", 0)),
                "noise_in_training": cfg.noise is not None,
            }
        )
    return {"terms": terms, "size": int(sum(t["dim"] for t in terms))}


def _action_term(env: Any, name: str) -> JSONDict:
    """An action term: its joints, the actuators driving them, scale, offset and clip."""
    import mujoco

    term = env.action_manager.get_term(name)
    model = env.sim.mj_model
    entity = term.cfg.entity_name
    joints = _prefixed(entity, term.target_names)
    actuators = []
    for joint in joints:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint)
        driving = [i for i in range(model.nu) if int(model.actuator_trnid[i, 0]) == jid]
        actuators.append(model.actuator(driving[0]).name if driving else None)
    dim = len(joints)
    clip = getattr(term, "_clip", None)
    return {
        "name": name,
        "kind": type(term).__name__,
        "joints": joints,
        "actuators": actuators,
        "actuator_kind": sorted({type(a).__name__ for a in env.scene[entity].actuators}),
        "scale": _term_scale(term.scale if not torch.is_tensor(term.scale) else term.scale[0], dim),
        "offset": _term_scale(
            term.offset if not torch.is_tensor(term.offset) else term.offset[0], dim
        ),
        "clip": None if clip is None else clip[0].cpu().tolist(),
    }


def _falls(env: Any) -> list[JSONDict]:
    """mjlab's termination terms that tell a fall by the trunk's tilt."""
    manager = env.termination_manager
    out = []
    for name in manager.active_terms:
        cfg = manager.get_term_cfg(name)
        if cfg.func.__name__ == "bad_orientation" and not cfg.time_out:
            out.append({"term": name, "limit_angle": float(cfg.params["limit_angle"])})
    return out


# ------------------------------------------------------------------------------ the model
def _save_model(env: Any, path: Path) -> bool:
    """Save the scene's MuJoCo model to `path`, without its drawn-only geoms where that leaves
    the physics as it is; returns whether they were left out."""
    import mujoco

    full = env.sim.mj_model
    spec = env.scene.spec.copy()
    drawn = [
        g
        for g in spec.geoms
        if g.contype == 0 and g.conaffinity == 0 and g.type == mujoco.mjtGeom.mjGEOM_MESH
    ]
    for geom in drawn:
        spec.delete(geom)
    used = {g.meshname for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH}
    for mesh in [m for m in spec.meshes if m.name not in used]:
        spec.delete(mesh)
    try:
        small = spec.compile()
        env.cfg.sim.mujoco.apply(small)
        same = _same_physics(full, small)
    except Exception:  # a scene that does not compile without them keeps them
        same = False
    path.parent.mkdir(parents=True, exist_ok=True)
    mujoco.mj_saveModel(small if same else full, str(path), None)
    return same


def _same_physics(full: Any, small: Any) -> bool:
    """Whether two models step alike: options, bodies, joints, actuators and colliding geoms."""
    for name in ("timestep", "iterations", "ls_iterations", "ccd_iterations", "impratio", "cone",
                 "integrator", "solver", "tolerance", "gravity"):  # fmt: skip
        if not np.array_equal(getattr(full.opt, name), getattr(small.opt, name)):
            return False
    if (full.nbody, full.njnt, full.nu, full.nsensor) != (
        small.nbody,
        small.njnt,
        small.nu,
        small.nsensor,
    ):
        return False
    if any(not np.array_equal(getattr(full, f), getattr(small, f)) for f in _PHYSICS_FIELDS):
        return False
    collide = [
        (full.geom_contype != 0) | (full.geom_conaffinity != 0),
        (small.geom_contype != 0) | (small.geom_conaffinity != 0),
    ]
    return all(
        np.array_equal(getattr(full, f)[collide[0]], getattr(small, f)[collide[1]])
        for f in _GEOM_FIELDS
    )
