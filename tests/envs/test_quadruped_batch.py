"""The quadruped's vector env against its single env (bit for bit, every randomization on, both
terrains, on one thread and on two), the time limit's truncation (rule 1), exact resume of the
vector env, and the actuators' controllers against the Python PD loop of the accurate model
(the MJCF's plain motors, as examples/deploy/quadruped.py drives them)."""

from __future__ import annotations

import io

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch
from embodied_ppo_envs.quadruped_robot import (
    ACTION_SCALE,
    DECIMATION,
    KD,
    KP,
    STAND,
    TORQUE_LIMIT,
    XML,
)
from embodied_ppo_envs.quadruped_vector import QuadrupedVectorEnv

from embodied_ppo.vecenv.state import from_checkpoint, to_checkpoint

FLAT, ROUGH = "EmbodiedPPO/QuadrupedFlat-v0", "EmbodiedPPO/QuadrupedRough-v0"
TERRAIN = {FLAT: {"terrain": "flat"}, ROUGH: {"terrain": "rough"}}
ALL_ON = {
    "randomization": {
        "friction": [0.4, 1.25],
        "added_mass": [-1.0, 1.0],
        "com_offset": [-0.03, 0.03],
        "motor_strength": [0.8, 1.2],
        "kp_scale": [0.8, 1.2],
        "kd_scale": [0.8, 1.2],
        "push_interval_s": 0.3,
        "push_velocity": 0.5,
    },
    "noise": {"base_ang_vel": 0.2, "projected_gravity": 0.05, "joint_vel": 1.5},
    "action_delay": 2,
    "commands": {"resample_s": 0.5, "curriculum": True, "zero_prob": [0.3, 0.6, 0.4]},
}
LIMIT = 40  # short episodes: time limits, falls and resets within the test


def assert_same_obs(a: dict, b: dict, where: str) -> None:
    assert a.keys() == b.keys(), where
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}: {key}")


@pytest.mark.parametrize("env_id", [FLAT, ROUGH])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_vector_env_steps_each_env_as_its_single_env_does(env_id, threads):
    n, seeds = 5, [11, 12, 13, 14, 15]
    singles = [gym.make(env_id, max_episode_steps=LIMIT, **ALL_ON) for _ in range(n)]
    vector = QuadrupedVectorEnv(
        n, max_episode_steps=LIMIT, threads=threads, **TERRAIN[env_id], **ALL_ON
    )
    obs, _ = vector.reset(seed=seeds)
    for i, (env, seed) in enumerate(zip(singles, seeds)):
        assert_same_obs(env.reset(seed=seed)[0], {k: v[i] for k, v in obs.items()}, "reset")
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(3 * LIMIT):
        actions = rng.normal(0.0, 1.5, (n, 12)).astype(np.float32)
        obs, reward, terminated, truncated, info = vector.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, inf = env.step(actions[i])
            where = f"step {t}, env {i}"
            assert (r, te, tr) == (reward[i], terminated[i], truncated[i]), where
            if te or tr:
                ends["terminated" if te else "truncated"] += 1
                assert info["_final_obs"][i], where
                assert_same_obs(o, info["final_obs"][i], where + " (final)")
                assert inf["log"] == info["final_info"]["log"][i], where
                o, _ = env.reset()
            assert_same_obs(o, {k: v[i] for k, v in obs.items()}, where)
    assert ends["terminated"] > 0 and ends["truncated"] > 0  # both ways of ending were met
    vector.close()


def test_the_time_limit_truncates_at_the_limit_with_the_last_observation():
    # Standing on the standing pose's targets: no falls, every episode reaches the limit.
    vector = QuadrupedVectorEnv(3, max_episode_steps=25)
    vector.reset(seed=[1, 2, 3])
    zeros = np.zeros((3, 12), np.float32)
    for t in range(1, 26):
        obs, _, terminated, truncated, info = vector.step(zeros)
        assert not terminated.any()
        assert truncated.all() == (t == 25) and truncated.any() == (t == 25)
    # The episode's last observation is kept for its value to bootstrap from (rule 1); the
    # one returned is the next episode's first (its command drawn anew, its log restarted).
    assert info["_final_obs"].all()
    for i in range(3):
        last = info["final_obs"][i]
        assert not np.array_equal(last["joint_vel"], obs["joint_vel"][i])
        assert info["final_info"]["log"][i]["metrics/fall_rate"] == 0.0
    assert (vector.elapsed == 0).all()


def roundtrip(states: list) -> list:
    """Through a checkpoint: tensors and plain values, loaded weights-only."""
    buffer = io.BytesIO()
    torch.save(to_checkpoint(states), buffer)
    buffer.seek(0)
    return from_checkpoint(torch.load(buffer, weights_only=True))


@pytest.mark.parametrize("env_id", [FLAT, ROUGH])
def test_the_vector_env_resumes_bit_for_bit(env_id):
    kwargs = {**TERRAIN[env_id], **ALL_ON, "max_episode_steps": LIMIT}
    a, b = QuadrupedVectorEnv(4, **kwargs), QuadrupedVectorEnv(4, **kwargs)
    actions = np.random.default_rng(1).normal(0, 1.5, (150, 4, 12)).astype(np.float32)
    a.reset(seed=[5, 6, 7, 8])
    for action in actions[:57]:  # past episode ends: the curricula have moved
        a.step(action)
    states = roundtrip(a.state_dicts())
    b.reset(seed=[99, 98, 97, 96])  # other episodes, other draws: all replaced
    for action in actions[:13]:
        b.step(action)
    b.load_state_dicts(states)
    for action in actions[57:]:
        first, second = a.step(action), b.step(action)
        assert_same_obs(first[0], second[0], "obs")
        for x, y in zip(first[1:4], second[1:4]):
            np.testing.assert_array_equal(x, y)
        assert first[4].keys() == second[4].keys()
    for ma, mb in zip(a.batch.robots.models, b.batch.robots.models):
        np.testing.assert_array_equal(ma.geom_friction, mb.geom_friction)
        np.testing.assert_array_equal(ma.actuator_gainprm, mb.actuator_gainprm)


def test_the_actuators_follow_the_python_pd_loop_of_the_accurate_model():
    """One policy step of the training model (position actuators) and of the MJCF's plain motors
    driven by the PD law in Python at every physics step, from the same state, with the same
    motor strengths and gain scales: the same motion to float rounding."""
    randomization = {"motor_strength": [0.8, 1.2], "kp_scale": [0.8, 1.2], "kd_scale": [0.8, 1.2]}
    env = gym.make(FLAT, randomization=randomization)
    inner = env.unwrapped
    motors = mujoco.MjModel.from_xml_path(str(XML))
    data = mujoco.MjData(motors)
    kind = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    rng = np.random.default_rng(3)
    env.reset(seed=4)
    strength, kp_scale, kd_scale = inner.randomizer.actuation.scales
    worst = 0.0
    for _ in range(30):
        action = rng.normal(0, 2.0, 12).astype(np.float32)  # large: some torques saturate
        state = np.empty(mujoco.mj_stateSize(inner.model, kind))
        mujoco.mj_getState(inner.model, inner.data, state, kind)
        mujoco.mj_setState(motors, data, state, kind)
        _, _, terminated, _, _ = env.step(action)
        target = STAND + ACTION_SCALE * action.astype(np.float64)
        for _ in range(DECIMATION):
            q, qd = data.qpos[7:], data.qvel[6:]
            tau = KP * kp_scale * (target - q) - KD * kd_scale * qd
            data.ctrl[:] = strength * np.clip(tau, -TORQUE_LIMIT, TORQUE_LIMIT)
            mujoco.mj_step(motors, data)
        np.testing.assert_allclose(inner.data.actuator_force, data.ctrl, rtol=1e-9, atol=1e-9)
        worst = max(worst, np.abs(inner.data.qpos - data.qpos).max())
        np.testing.assert_allclose(inner.data.qvel, data.qvel, rtol=1e-7, atol=1e-7)
        if terminated:
            break
    assert worst < 1e-9


def test_fast_physics_leaves_out_the_leg_links_contacts_and_solves_in_one_iteration():
    accurate = gym.make(FLAT).unwrapped
    fast = gym.make(FLAT, physics="fast").unwrapped
    m = fast.model
    assert (m.opt.iterations, m.opt.ls_iterations) == (1, 5)
    assert m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    touching = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(m.ngeom)
                if m.geom_contype[g] or m.geom_conaffinity[g]}  # fmt: skip
    assert {"floor", "trunk", "FR_hip", "FR_foot"} <= touching
    assert not {"FR_thigh", "FR_calf", "RL_thigh"} & touching
    # Only the contacts and the solver differ: the bodies, joints and actuators are the same.
    for name in ("body_mass", "dof_armature", "jnt_range", "actuator_gainprm", "geom_size"):
        np.testing.assert_array_equal(getattr(m, name), getattr(accurate.model, name))
    with pytest.raises(ValueError, match="thighs and calves do not touch"):
        gym.make(FLAT, physics="fast", fall_contacts=["trunk", "thigh"])
