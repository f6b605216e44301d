"""The sim-to-real toolkit: each term changes what it claims and nothing else, draws come from
the env's own seeded generators, and envs captured mid-episode resume bit for bit."""

from __future__ import annotations

import io

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch
from embodied_ppo_envs import TaskConfigError
from embodied_ppo_envs.quadruped_robot import ACTION_SCALE, STAND
from embodied_ppo_envs.sim2real import ActionDelay, DomainRandomization, ObservationNoise
from gymnasium import spaces

from embodied_ppo.vecenv.state import capture_env, from_checkpoint, restore_env, to_checkpoint

FLAT = "EmbodiedPPO/QuadrupedFlat-v0"

TOY_XML = """
<mujoco>
  <option gravity="0 0 0" timestep="0.01"/>
  <worldbody>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <geom name="box" type="box" size="0.2 0.1 0.05" mass="2" friction="0.7 0.005 0.0001"/>
      <body name="arm" pos="0.2 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom name="stick" type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="hinge" kp="10" kv="0.5" forcerange="-3 3"/>
  </actuator>
</mujoco>
"""


class ToyEnv(gym.Env):
    """A floating box with a position-controlled arm, no gravity and no contacts: its velocity
    changes only through the arm and the pushes. Records the actions it receives."""

    def __init__(self, dict_obs: bool = True) -> None:
        self.model = mujoco.MjModel.from_xml_string(TOY_XML)
        self.data = mujoco.MjData(self.model)
        self.dt = 0.02
        self.dict_obs = dict_obs
        box = spaces.Box(-np.inf, np.inf, (8,), np.float32)
        vel = spaces.Box(-np.inf, np.inf, (7,), np.float32)
        self.observation_space = spaces.Dict({"pos": box, "vel": vel}) if dict_obs else box
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.received: list[np.ndarray] = []

    def _obs(self):
        pos = self.data.qpos.astype(np.float32)
        return {"pos": pos, "vel": self.data.qvel.astype(np.float32)} if self.dict_obs else pos

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[7] = self.np_random.uniform(-0.5, 0.5)
        self.received = []
        return self._obs(), {}

    def step(self, action):
        self.received.append(np.array(action, dtype=np.float64))
        self.data.ctrl[:] = action
        for _ in range(2):
            mujoco.mj_step(self.model, self.data)
        return self._obs(), 0.0, False, False, {}


def model_arrays(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    """Every numeric array of a MuJoCo model, copied."""
    out = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        value = getattr(model, name, None)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = value.copy()
    return out


def changed(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> set[str]:
    return {k for k in before if not np.array_equal(before[k], after[k])}


# ------------------------------------------------------------------ model terms
def test_friction_draws_stay_in_range_and_change_only_friction():
    env = gym.make(FLAT, randomization={"friction": [0.4, 1.25]})
    inner = env.unwrapped
    nominal = model_arrays(inner.model)
    draws = []
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        after = model_arrays(inner.model)
        assert changed(nominal, after) <= {"geom_friction"}
        friction = after["geom_friction"]
        np.testing.assert_allclose(friction[:, 0], obs["friction"][0], atol=1e-7)  # float32
        np.testing.assert_array_equal(friction[:, 1:], nominal["geom_friction"][:, 1:])
        draws.append(friction[0, 0])
    assert min(draws) >= 0.4 and max(draws) <= 1.25 and np.ptp(draws) > 0.4


def test_added_mass_changes_the_trunk_mass_by_the_draw_and_nothing_else():
    env = gym.make(FLAT, randomization={"added_mass": [-1.0, 1.0]})
    inner = env.unwrapped
    nominal = model_arrays(inner.model)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        after = model_arrays(inner.model)
        assert changed(nominal, after) == {"body_mass"}
        delta = after["body_mass"] - nominal["body_mass"]
        assert np.count_nonzero(delta) == 1 and delta[inner.trunk] != 0
        assert delta[inner.trunk] == pytest.approx(obs["added_mass"][0], abs=1e-6)
        assert -1.0 <= delta[inner.trunk] <= 1.0


def test_com_offset_moves_only_the_trunks_centre_of_mass():
    env = gym.make(FLAT, randomization={"com_offset": [[-0.05, 0.05], [0.0, 0.0], [0.01, 0.02]]})
    inner = env.unwrapped
    nominal = model_arrays(inner.model)
    env.reset(seed=0)
    after = model_arrays(inner.model)
    assert changed(nominal, after) == {"body_ipos"}
    offset = after["body_ipos"][inner.trunk] - nominal["body_ipos"][inner.trunk]
    assert abs(offset[0]) <= 0.05 and offset[1] == 0.0 and 0.01 <= offset[2] <= 0.02


def test_motor_strength_and_gains_scale_the_actuators_and_nothing_else():
    env = gym.make(
        FLAT,
        randomization={"motor_strength": [0.8, 1.2], "kp_scale": [0.5, 0.6], "kd_scale": [2, 3]},
    )
    inner = env.unwrapped
    nominal = model_arrays(inner.model)
    obs, _ = env.reset(seed=0)
    after = model_arrays(inner.model)
    assert changed(nominal, after) == {
        "actuator_gainprm",
        "actuator_biasprm",
        "actuator_forcerange",
    }
    strength, kp, kd = inner.randomizer.actuation.scales
    assert np.all((strength >= 0.8) & (strength <= 1.2)) and np.ptp(strength) > 0
    assert np.all(kp == kp[0]) and 0.5 <= kp[0] <= 0.6 and 2 <= kd[0] <= 3
    np.testing.assert_allclose(obs["motor_strength"], strength, rtol=1e-6)
    # The controllers' gains and limits: each motor's nominal ones times its scales.
    gain = nominal["actuator_gainprm"][:, 0]
    np.testing.assert_allclose(after["actuator_gainprm"][:, 0], gain * kp * strength)
    np.testing.assert_allclose(after["actuator_biasprm"][:, 1], -gain * kp * strength)
    damping = -nominal["actuator_biasprm"][:, 2]
    np.testing.assert_allclose(after["actuator_biasprm"][:, 2], -damping * kd * strength)
    np.testing.assert_allclose(
        after["actuator_forcerange"], nominal["actuator_forcerange"] * strength[:, None]
    )


def test_position_actuators_get_scaled_gains_bias_and_force_range():
    env = DomainRandomization(
        ToyEnv(), motor_strength=[0.5, 0.5], kp_scale=[3.0, 3.0], kd_scale=[3.0, 3.0]
    )
    model = env.unwrapped.model
    nominal = model_arrays(model)
    env.reset(seed=0)
    after = model_arrays(model)
    assert changed(nominal, after) == {
        "actuator_gainprm",
        "actuator_biasprm",
        "actuator_forcerange",
    }
    assert model.actuator_gainprm[0, 0] == pytest.approx(10 * 3.0 * 0.5)
    assert model.actuator_biasprm[0, 1] == pytest.approx(-10 * 3.0 * 0.5)
    assert model.actuator_biasprm[0, 2] == pytest.approx(-0.5 * 3.0 * 0.5)
    np.testing.assert_allclose(model.actuator_forcerange[0], [-1.5, 1.5])


def test_a_wrapper_refuses_an_env_it_cannot_scale():
    class Motors(ToyEnv):
        def __init__(self):
            super().__init__()
            self.model = mujoco.MjModel.from_xml_string(
                TOY_XML.replace('<position joint="hinge" kp="10" kv="0.5"', '<motor joint="hinge"')
            )
            self.data = mujoco.MjData(self.model)

    with pytest.raises(TaskConfigError) as info:
        DomainRandomization(Motors(), motor_strength=[0.9, 1.1])
    assert info.value.key == "motor_strength"
    with pytest.raises(TaskConfigError) as info:
        DomainRandomization(ToyEnv(), frction=[0.9, 1.1])
    # The key is in the message too: it reaches the user as the message of env.wrappers[i].
    assert info.value.key == "frction" and str(info.value).startswith("frction: unknown term")
    assert "'friction'" in str(info.value)


# ------------------------------------------------------------------ pushes
def test_pushes_kick_the_base_velocity_at_the_configured_interval():
    # No gravity, no contacts, the arm at rest: the box's linear velocity changes only by kicks.
    env = DomainRandomization(ToyEnv(), body="torso", push_interval_s=0.1, push_velocity=0.8)
    env.reset(seed=0)
    data = env.unwrapped.data
    env.unwrapped.data.qpos[7] = 0.0
    kicks = []
    for step in range(1, 31):
        before = data.qvel[:3].copy()
        env.step(np.zeros(1, np.float32))
        jump = data.qvel[:3] - before
        if np.any(np.abs(jump) > 1e-9):
            kicks.append(step)
            np.testing.assert_allclose(jump[:2], env.randomizer.pushes.last, atol=1e-9)
            assert jump[2] == pytest.approx(0.0, abs=1e-9)  # horizontal only
            assert np.all(np.abs(jump[:2]) <= 0.8)
    assert kicks == [5, 10, 15, 20, 25, 30]  # every 0.1 s at 0.02 s per step


def test_quadruped_pushes_change_only_what_follows_the_first_push():
    plain = gym.make(FLAT, randomization={"friction": [1, 1]})
    pushed = gym.make(
        FLAT, randomization={"friction": [1, 1], "push_interval_s": 0.2, "push_velocity": 1.0}
    )
    a, _ = plain.reset(seed=0)
    b, _ = pushed.reset(seed=0)
    first = None
    for step in range(1, 16):
        a = plain.step(np.zeros(12, np.float32))[0]
        b = pushed.step(np.zeros(12, np.float32))[0]
        if first is None and not np.array_equal(a["base_lin_vel"], b["base_lin_vel"]):
            first = step
    assert first == 10  # the first push, 0.2 s in


# ------------------------------------------------------------------ noise and delay
@pytest.mark.parametrize("distribution", ["uniform", "gaussian"])
def test_noise_has_the_configured_scale_on_its_key_only(distribution):
    clean = gym.make(FLAT)
    noisy = gym.make(FLAT, noise={"joint_vel": 1.5}, noise_distribution=distribution)
    a, _ = clean.reset(seed=0)
    b, _ = noisy.reset(seed=0)
    diffs = []
    rng = np.random.default_rng(0)
    for _ in range(200):
        action = rng.normal(0, 0.3, 12).astype(np.float32)
        a, *_ = clean.step(action)
        b, *_ = noisy.step(action)
        for key in a:
            if key != "joint_vel":
                np.testing.assert_array_equal(a[key], b[key])
        diffs.append(b["joint_vel"].astype(np.float64) - a["joint_vel"])
    diffs = np.concatenate(diffs)
    expected_std = 1.5 / np.sqrt(3) if distribution == "uniform" else 1.5
    assert np.std(diffs) == pytest.approx(expected_std, rel=0.05)
    assert abs(np.mean(diffs)) < 0.1
    if distribution == "uniform":
        assert np.abs(diffs).max() <= 1.5 + 1e-5


def test_the_noise_wrapper_noises_the_named_key_of_any_env():
    clean, noisy = ToyEnv(), ObservationNoise(ToyEnv(), scales={"vel": 0.1})
    a, _ = clean.reset(seed=0)
    b, _ = noisy.reset(seed=0)
    np.testing.assert_array_equal(a["pos"], b["pos"])
    assert 0 < np.abs(a["vel"] - b["vel"]).max() <= 0.1 + 1e-7
    box = ObservationNoise(ToyEnv(dict_obs=False), scales={"obs": 0.2}, distribution="gaussian")
    obs, _ = box.reset(seed=0)
    assert obs.shape == (8,) and not np.array_equal(obs, ToyEnv(dict_obs=False).reset(seed=0)[0])


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_delay_of_k_applies_the_action_of_k_steps_before(k):
    env = ActionDelay(ToyEnv(), steps=[k, k])
    env.reset(seed=0)
    given = [np.array([0.1 * (t + 1)], np.float32) for t in range(8)]
    for action in given:
        env.step(action)
    received = np.concatenate(env.unwrapped.received)
    expected = [0.0] * k + [float(a[0]) for a in given[: len(given) - k]]
    np.testing.assert_allclose(received, expected, rtol=1e-6)


@pytest.mark.parametrize("k", [0, 2])
def test_the_quadruped_targets_follow_the_action_of_k_steps_before(k):
    env = gym.make(FLAT, action_delay=[k, k])
    inner = env.unwrapped
    env.reset(seed=0)
    actions = [np.full(12, 0.1 * (t + 1), np.float32) for t in range(6)]
    for t, action in enumerate(actions):
        env.step(action)
        applied = actions[t - k] if t >= k else np.zeros(12)
        expected = STAND + ACTION_SCALE * applied.astype(np.float64)
        np.testing.assert_allclose(inner.data.ctrl, expected)  # the actuators' targets
        np.testing.assert_array_equal(inner.action, action)  # the policy still sees its own


def test_delays_are_drawn_per_episode_from_the_range():
    env = gym.make(FLAT, action_delay=3)
    seen = set()
    env.reset(seed=0)
    for _ in range(40):
        seen.add(int(env.unwrapped.delay.k[0]))
        env.reset()
    assert seen == {0, 1, 2, 3}


def test_each_component_draws_from_its_own_stream():
    friction = {"randomization": {"friction": [0.4, 1.25]}}
    more = {
        "randomization": {"friction": [0.4, 1.25], "added_mass": [-1, 1]},
        "noise": {"joint_pos": 0.01},
        "action_delay": 2,
    }
    a, b = gym.make(FLAT, **friction), gym.make(FLAT, **more)
    for seed in range(3):
        a.reset(seed=seed)
        b.reset(seed=seed)
        for _ in range(3):
            assert (
                a.unwrapped.randomizer.value("friction")[0]
                == b.unwrapped.randomizer.value("friction")[0]
            )
            a.reset()
            b.reset()


# ------------------------------------------------------------------ exact resume
def roundtrip(state: dict) -> dict:
    """Through a checkpoint: tensors and plain values, weights-only load."""
    buffer = io.BytesIO()
    torch.save(to_checkpoint(state), buffer)
    buffer.seek(0)
    return from_checkpoint(torch.load(buffer, weights_only=True))


def steps(env: gym.Env, actions: np.ndarray) -> list:
    out = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info.get("log")))
        if terminated or truncated:
            out.append(env.reset()[0])
    return out


def same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b))
    return bool(np.array_equal(a, b))


RANDOMIZED = {
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
    "noise": {"base_ang_vel": 0.2, "joint_vel": 1.5, "height_scan": 0.05},
    "action_delay": 2,
    "commands": {"resample_s": 0.5, "curriculum": True},
}


@pytest.mark.parametrize("env_id", [FLAT, "EmbodiedPPO/QuadrupedRough-v0"])
def test_a_randomized_quadruped_resumes_bit_for_bit(env_id):
    # Short episodes, so the resumed part crosses episode ends (fresh draws from the restored
    # generators, and the curricula's levels).
    a = gym.make(env_id, max_episode_steps=40, **RANDOMIZED)
    b = gym.make(env_id, max_episode_steps=40, **RANDOMIZED)
    actions = np.random.default_rng(0).normal(0, 1, (150, 12)).astype(np.float32)
    a.reset(seed=5)
    steps(a, actions[:57])  # mid-episode, after an episode end
    state = roundtrip(capture_env(a))
    b.reset(seed=99)  # another episode, other draws: all of it must be replaced
    steps(b, actions[:13])
    restore_env(b, state)
    first, second = steps(a, actions[57:]), steps(b, actions[57:])
    assert len(first) == len(second) and all(same(x, y) for x, y in zip(first, second))
    # The model values the randomization drew are back too (MjModel is not in MjData's state).
    np.testing.assert_array_equal(a.unwrapped.model.geom_friction, b.unwrapped.model.geom_friction)
    np.testing.assert_array_equal(a.unwrapped.model.body_mass, b.unwrapped.model.body_mass)


def test_wrapped_user_envs_resume_bit_for_bit():
    def make() -> gym.Env:
        env = DomainRandomization(
            ToyEnv(),
            body="torso",
            friction=[0.3, 1.0],
            added_mass=[-0.5, 0.5],
            motor_strength=[0.5, 1.5],
            push_interval_s=0.06,
            push_velocity=0.5,
        )
        env = ObservationNoise(env, scales={"vel": 0.1, "pos": 0.01})
        return gym.wrappers.TimeLimit(ActionDelay(env, steps=2), 25)

    a, b = make(), make()
    actions = np.random.default_rng(1).uniform(-1, 1, (100, 1)).astype(np.float32)
    a.reset(seed=3)
    steps(a, actions[:31])
    state = roundtrip(capture_env(a))
    b.reset(seed=4)
    restore_env(b, state)
    first, second = steps(a, actions[31:]), steps(b, actions[31:])
    assert all(same(x, y) for x, y in zip(first, second))
    assert b.unwrapped.model.body_mass[1] == a.unwrapped.model.body_mass[1]
