"""The quadruped's declared left-right mirror (envs/quadruped_mirror.py): a mirror of its spaces,
an involution, the geometry it claims, and the symmetry of the task's dynamics."""

from __future__ import annotations

import copy

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch
from embodied_ppo_envs.quadruped_mirror import MIRROR
from embodied_ppo_envs.quadruped_observations import SCAN_OFFSETS

from embodied_ppo.algo.mirror import Mirror
from embodied_ppo.vecenv.spaces import describe_spaces

ID = "EmbodiedPPO/QuadrupedFlat-v0"


def declared() -> tuple[gym.Env, Mirror]:
    """A flat quadruped (randomization and noise off: the task's defaults) and its mirror, as
    a run reads it: the env's metadata, checked against its spaces."""
    env = gym.make(ID)
    info = describe_spaces(env.observation_space, env.action_space)
    shapes = {k: v.shape for k, v in info.obs_keys.items()}
    return env, Mirror.from_declaration(env.metadata["mirror"], shapes, info.action_dim)


def test_the_mirror_of_the_mirror_is_the_identity():
    env, mirror = declared()
    env.close()
    assert env.metadata["mirror"] is MIRROR
    g = torch.Generator().manual_seed(0)
    obs = {
        k: torch.randn(7, *space.shape, generator=g) for k, space in env.observation_space.items()
    }
    twice = mirror.obs(mirror.obs(obs))
    for k in obs:
        assert torch.equal(twice[k], obs[k]), k
    actions = torch.randn(7, 12, generator=g)
    assert torch.equal(mirror.actions(mirror.actions(actions)), actions)
    assert not torch.equal(mirror.actions(actions), actions)


def test_the_mirror_swaps_the_legs_and_reverses_the_lateral_axis():
    """Joints in the order FR, FL, RR, RL x (abduction, thigh, knee): the mirror of a right
    leg's pose is the left leg's with the abduction negated; each foot's height-scan point at
    (x, y) around the foot becomes the partner foot's point at (x, -y)."""
    _, mirror = declared()
    joints = torch.arange(1.0, 13.0)[None]  # FR 1 2 3, FL 4 5 6, RR 7 8 9, RL 10 11 12
    expected = torch.tensor([-4.0, 5, 6, -1, 2, 3, -10, 11, 12, -7, 8, 9])[None]
    assert torch.equal(mirror.actions(joints), expected)
    for key in ("joint_pos", "joint_vel", "last_action"):
        assert torch.equal(mirror.obs({**_zeros(), key: joints})[key], expected)
    strength = mirror.obs({**_zeros(), "motor_strength": joints})["motor_strength"]
    assert torch.equal(strength, expected.abs())  # strengths go with their legs, unsigned
    vector = torch.tensor([[1.0, 2.0, 3.0]])
    signs = {
        "base_lin_vel": [1, -1, 1],
        "projected_gravity": [1, -1, 1],
        "base_ang_vel": [-1, 1, -1],  # roll and yaw rates: a pseudovector
        "command": [1, -1, -1],  # vx, vy, yaw rate
    }
    for key, sign in signs.items():
        out = mirror.obs({**_zeros(), key: vector})[key]
        assert torch.equal(out, vector * torch.tensor(sign, dtype=torch.float32)), key
    contacts = mirror.obs({**_zeros(), "contacts": torch.tensor([[1.0, 0, 0, 0]])})["contacts"]
    assert torch.equal(contacts, torch.tensor([[0.0, 1, 0, 0]]))
    # The height scan, against the grid's geometry.
    scan = torch.arange(36.0)[None]
    out = mirror.obs({**_zeros(), "height_scan": scan})["height_scan"][0].long()
    partner = (1, 0, 3, 2)
    for foot in range(4):
        for point in range(9):
            source = int(out[foot * 9 + point])
            assert source // 9 == partner[foot]
            x, y = SCAN_OFFSETS[point]
            assert np.allclose(SCAN_OFFSETS[source % 9], (x, -y))


def _zeros() -> dict[str, torch.Tensor]:
    env = gym.make(ID)
    out = {k: torch.zeros(1, *space.shape) for k, space in env.observation_space.items()}
    env.close()
    return out


def _vector(x: np.ndarray, entry: dict) -> np.ndarray:
    out = np.asarray(x, dtype=np.float64)[entry.get("perm", list(range(len(x))))].copy()
    out[entry.get("negate", [])] *= -1.0
    return out


def mirrored_state(env: gym.Env, state: dict) -> dict:
    """The task's state (`state_dict`) of the mirrored world: the trunk's position, orientation
    and velocities reflected through the x-z plane (y, the quaternion's x and z, the world
    y velocity, the body roll and yaw rates negated), the joints (and the solver's warm start)
    mirrored as the action is, the per-leg and per-foot arrays swapped, the command mirrored."""
    state = copy.deepcopy(state)
    joints = MIRROR["action"]
    model = env.unwrapped.batch.robots.models[0]
    data = mujoco.MjData(model)
    kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_setState(model, data, state["physics"], kind)
    qpos = data.qpos.copy()
    qpos[[1, 4, 6]] *= -1.0  # y; quaternion (w, x, y, z): x and z
    qpos[7:] = _vector(qpos[7:], joints)
    data.qpos[:] = qpos
    for dof in (data.qvel, data.qacc_warmstart):
        v = dof.copy()
        v[[1, 3, 5]] *= -1.0  # world y velocity; body roll and yaw rates
        v[6:] = _vector(v[6:], joints)
        dof[:] = v
    data.ctrl[:] = _vector(data.ctrl, joints)  # absolute joint targets; the stance is symmetric
    physics = np.empty(mujoco.mj_stateSize(model, kind))
    mujoco.mj_getState(model, data, physics, kind)
    state["physics"] = physics
    arrays = state["arrays"]
    for name in ("action", "prev_action", "last_qd"):
        arrays[name] = _vector(arrays[name], joints)
    for name in ("air_time", "last_contacts", "contacts"):
        arrays[name] = arrays[name][[1, 0, 3, 2]]
    state["commands"]["command"] = _vector(state["commands"]["command"], {"negate": [1, 2]})
    return state


def test_the_quadrupeds_dynamics_are_mirror_symmetric():
    """With randomization and noise off (the task's defaults), the mirrored action from the
    mirrored state gives the mirrored observation, the same reward and the same termination,
    step after step: the declaration describes a symmetry of the task, not only of its spaces."""
    env_a, mirror = declared()
    env_b = gym.make(ID)
    a, b = env_a.unwrapped, env_b.unwrapped
    a.reset(seed=3)
    b.reset(seed=3)
    state = a.state_dict()
    state["commands"]["command"] = np.array([0.4, 0.3, -0.5])  # every component mirrored
    a.load_state_dict(state)
    b.load_state_dict(mirrored_state(a, state))
    rng = np.random.default_rng(0)
    for t in range(40):
        action = rng.normal(0.0, 1.0, 12)
        obs_a, reward_a, fell_a, *_ = a.step(action)
        obs_b, reward_b, fell_b, *_ = b.step(_vector(action, MIRROR["action"]))
        expected = mirror.obs({k: torch.as_tensor(v)[None] for k, v in obs_a.items()})
        for k in obs_a:
            np.testing.assert_allclose(
                obs_b[k], expected[k][0].numpy(), atol=1e-5, err_msg=f"{k} at {t}"
            )
        assert reward_b == pytest.approx(reward_a, abs=1e-6) and fell_a == fell_b
    moved = {k: float(np.abs(obs_a[k] - obs_b[k]).max()) for k in obs_a}
    assert min(moved[k] for k in ("base_ang_vel", "joint_pos", "command", "height_scan")) > 1e-3
    env_a.close()
    env_b.close()


def test_the_symmetry_config_is_the_flat_config_with_symmetry():
    """configs/quadruped_flat_symmetry.yaml measures symmetry against quadruped_flat.yaml: every
    other key is the same."""
    import yaml
    from support import ROOT

    flat = yaml.safe_load((ROOT / "configs" / "quadruped_flat.yaml").read_text())
    symmetric = yaml.safe_load((ROOT / "configs" / "quadruped_flat_symmetry.yaml").read_text())
    assert symmetric["algorithm"].pop("symmetry") == {"augment": True, "mirror_loss_coef": 0.1}
    assert symmetric == flat
