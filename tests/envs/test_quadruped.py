"""The quadruped tasks: the env checker, seeding, the PD loop, episode ends, logs, commands and
task-argument errors."""

from __future__ import annotations

import embodied_ppo_envs
import gymnasium as gym
import mujoco
import numpy as np
import pytest
from embodied_ppo_envs import TaskConfigError
from embodied_ppo_envs.quadruped_observations import ACTOR_KEYS, PRIVILEGED_KEYS
from embodied_ppo_envs.quadruped_rewards import REWARD_TERMS
from embodied_ppo_envs.quadruped_robot import ACTION_SCALE, KD, KP, STAND, TORQUE_LIMIT
from gymnasium.utils.env_checker import check_env

FLAT, ROUGH = "EmbodiedPPO/QuadrupedFlat-v0", "EmbodiedPPO/QuadrupedRough-v0"

# Every randomization, noise on the robot's sensors, and a delay.
ALL_ON = {
    "randomization": {
        "friction": [0.4, 1.25],
        "added_mass": [-1.0, 1.0],
        "com_offset": [-0.03, 0.03],
        "motor_strength": [0.8, 1.2],
        "kp_scale": [0.8, 1.2],
        "kd_scale": [0.8, 1.2],
        "push_interval_s": 0.5,
        "push_velocity": 0.5,
    },
    "noise": {"base_ang_vel": 0.2, "projected_gravity": 0.05, "joint_pos": 0.01, "joint_vel": 1.5},
    "action_delay": 2,
}


def rollout(env: gym.Env, seed: int, steps: int, action_seed: int = 0) -> list:
    """Observations, rewards and flags of `steps` steps of seeded random actions (episodes
    that end are reset without a seed, as a vector env does)."""
    rng = np.random.default_rng(action_seed)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(rng.normal(0, 1, 12).astype(np.float32))
        out += [obs, reward, terminated, truncated, info["log"]]
        if terminated or truncated:
            obs, _ = env.reset()
            out.append(obs)
    return out


def same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(np.array_equal(a, b))


@pytest.mark.filterwarnings("ignore:.*WARN:")
@pytest.mark.parametrize("env_id", [FLAT, ROUGH])
def test_both_tasks_pass_gymnasiums_env_checker(env_id):
    env = gym.make(env_id, **ALL_ON)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.spec.max_episode_steps == 1000  # 20 s at 50 Hz
    assert env.unwrapped.dt == pytest.approx(0.02)
    assert env.unwrapped.model.opt.timestep == pytest.approx(0.005)


def test_observation_has_the_sensor_and_privileged_keys():
    env = gym.make(FLAT)
    obs, info = env.reset(seed=0)
    assert set(obs) == set(ACTOR_KEYS) | set(PRIVILEGED_KEYS)
    assert all(v.dtype == np.float32 and v.ndim == 1 for v in obs.values())
    assert obs["joint_pos"].shape == (12,) and obs["height_scan"].shape == (36,)
    # Standing upright: gravity points down the body's z axis.
    np.testing.assert_allclose(obs["projected_gravity"], [0, 0, -1], atol=1e-6)
    assert obs["friction"][0] == pytest.approx(1.0) and obs["added_mass"][0] == 0.0
    assert "log" in info


def test_the_model_is_a_twelve_joint_go1_class_robot():
    model = gym.make(FLAT).unwrapped.model
    assert model.nu == 12 and model.nv == 18  # 12 joints and a free base
    assert 11.5 < model.body_subtreemass[1] < 12.5  # Go1: about 12 kg
    thigh = model.body("FR_calf").pos
    assert np.linalg.norm(thigh) == pytest.approx(0.213)  # thigh length


@pytest.mark.parametrize("env_id", [FLAT, ROUGH])
def test_seeding_repeats_every_draw_with_everything_randomized(env_id):
    a, b = gym.make(env_id, **ALL_ON), gym.make(env_id, **ALL_ON)
    first, second = rollout(a, 3, 120), rollout(b, 3, 120)
    assert len(first) == len(second)
    assert all(same(x, y) for x, y in zip(first, second))
    third = rollout(a, 4, 120)
    assert not same(first[0], third[0])


def test_the_actuators_torque_is_the_clipped_scaled_pd_law_of_the_last_physics_step():
    env = gym.make(
        FLAT,
        randomization={"motor_strength": [0.8, 1.2], "kp_scale": [0.5, 2.0], "kd_scale": [0.5, 2]},
    )
    inner = env.unwrapped
    env.reset(seed=1)
    action = np.linspace(-4, 4, 12).astype(np.float32)
    # The state the last physics step of the policy step starts from: replayed by hand.
    state = inner.state_dict()
    env.step(action)
    torque = inner.data.actuator_force.copy()
    inner.load_state_dict(state)
    d, m = inner.data, inner.model
    d.ctrl[:] = STAND + ACTION_SCALE * action.astype(np.float64)
    mujoco.mj_step(m, d, 3)
    strength, kp, kd = inner.randomizer.actuation.scales
    target = STAND + ACTION_SCALE * action.astype(np.float64)
    tau = KP * kp * (target - d.qpos[7:]) - KD * kd * d.qvel[6:]
    law = strength * np.clip(tau, -TORQUE_LIMIT, TORQUE_LIMIT)
    np.testing.assert_allclose(torque, law, rtol=1e-12, atol=1e-9)
    assert np.all(np.abs(torque) <= TORQUE_LIMIT * strength + 1e-9)
    assert np.any(np.abs(torque) > 0.99 * TORQUE_LIMIT * strength)  # large actions saturate
    assert np.any(np.abs(torque) < 0.9 * TORQUE_LIMIT * strength)  # and some do not


def test_a_fall_terminates_and_the_time_limit_truncates():
    env = gym.make(FLAT)
    env.reset(seed=0)
    inner = env.unwrapped
    # Upside down, just above the ground: the trunk lands on it.
    inner.data.qpos[3:7] = [0.0, 1.0, 0.0, 0.0]
    inner.data.qpos[2] = 0.12
    for _ in range(50):
        _, reward, terminated, truncated, info = env.step(np.zeros(12, np.float32))
        if terminated:
            break
    assert terminated and not truncated and info["log"]["metrics/fall_rate"] == 1.0
    env.reset(seed=0)
    steps = 0
    while True:  # standing still on the standing pose's targets: no fall, 1000 steps
        _, _, terminated, truncated, info = env.step(np.zeros(12, np.float32))
        steps += 1
        if terminated or truncated:
            break
    assert truncated and not terminated and steps == 1000
    assert info["log"]["metrics/fall_rate"] == 0.0


def test_logs_hold_the_episode_so_far_and_the_terms_sum_to_the_return():
    env = gym.make(FLAT, only_positive_rewards=False, rewards={"orientation": -1.0})
    env.reset(seed=2)
    total, errors, rng = 0.0, [], np.random.default_rng(0)
    for _ in range(60):
        obs, reward, terminated, _, info = env.step(rng.normal(0, 0.5, 12).astype(np.float32))
        total += reward
        command = obs["command"].astype(np.float64)
        velocity = obs["base_lin_vel"].astype(np.float64)
        errors.append(np.hypot(*(command[:2] - velocity[:2])))
        assert not terminated
    log = info["log"]
    terms = {k for k in log if k.startswith("rewards/")}
    assert terms == {f"rewards/{t}" for t, w in REWARD_TERMS.items() if w != 0} | {
        "rewards/orientation"
    }
    assert sum(log[k] for k in terms) == pytest.approx(total, rel=1e-9)
    assert log["metrics/tracking_error_lin"] == pytest.approx(np.mean(errors), rel=1e-5)
    assert log["rewards/orientation"] < 0 and log["rewards/tracking_lin_vel"] > 0


def test_only_positive_rewards_clips_the_step_reward_at_zero():
    env = gym.make(FLAT, rewards={"torques": -10.0})
    env.reset(seed=0)
    rewards = [env.step(np.full(12, 3, np.float32))[1] for _ in range(10)]
    assert min(rewards) == 0.0


def test_a_command_schedule_replaces_the_random_commands():
    schedule = [[0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    env = gym.make(FLAT, command_schedule=schedule)
    obs, _ = env.reset(seed=0)
    seen = [obs["command"].tolist()]
    for _ in range(60):
        seen.append(env.step(np.zeros(12, np.float32))[0]["command"].tolist())
    # Step k's observation is at t = 0.02 k s.
    assert seen[0] == seen[24] == [1.0, 0.0, 0.0]
    assert seen[25] == seen[49] == [0.0, 0.0, 1.0]
    assert seen[50] == seen[60] == [0.0, 0.0, 0.0]


def test_random_commands_stay_in_range_include_standing_and_are_redrawn():
    commands = {"lin_vel_x": [0.2, 0.8], "lin_vel_y": [-0.1, 0.1], "yaw_rate": [-0.5, 0.5]}
    env = gym.make(FLAT, commands={**commands, "resample_s": 0.1, "stand_prob": 0.3})
    obs, _ = env.reset(seed=0)
    seen = [obs["command"]]
    for _ in range(200):
        seen.append(env.step(np.zeros(12, np.float32))[0]["command"])
    seen = np.array(seen)
    moving = seen[np.any(seen != 0, axis=1)]
    assert 0.15 < 1 - len(moving) / len(seen) < 0.45  # standing about 30% of the time
    assert moving[:, 0].min() >= 0.2 and moving[:, 0].max() <= 0.8
    assert np.abs(moving[:, 2]).max() <= 0.5
    changes = np.flatnonzero(np.any(np.diff(seen, axis=0) != 0, axis=1)) + 1
    assert set(changes) <= set(range(5, 201, 5))  # redrawn every 0.1 s = 5 steps


def test_the_command_curriculum_starts_narrow_and_widens_after_good_episodes():
    env = gym.make(FLAT, commands={"curriculum": {"initial": 0.2, "step": 0.4, "max_error": 10}})
    inner = env.unwrapped
    env.reset(seed=0)
    assert inner.commands.level[0] == pytest.approx(0.2)
    assert np.abs(inner.commands.command[0, 0]) <= 0.2 + 1e-9
    env.step(np.zeros(12, np.float32))
    env.reset()  # an episode without a fall and within the error: wider
    assert inner.commands.level[0] == pytest.approx(0.6)
    env.reset()
    env.reset()
    assert inner.commands.level[0] == pytest.approx(1.0)  # never beyond the configured ranges
    env.reset(seed=0)
    assert inner.commands.level[0] == pytest.approx(0.2)  # a seeded reset starts again


def test_rough_terrain_levels_follow_the_walked_distance():
    env = gym.make(ROUGH, terrain_options={"levels": 4, "initial_level": 1})
    inner = env.unwrapped
    obs, info = env.reset(seed=0)
    assert info["log"]["metrics/terrain_level"] == 1.0
    terrain = inner.terrain
    assert terrain.next_level(1, walked=4.0, path=5, commanded=5.0, fell=False) == 2
    assert terrain.next_level(3, walked=4.0, path=5, commanded=5.0, fell=False) == 3  # the top
    assert terrain.next_level(1, walked=1.0, path=2, commanded=5.0, fell=False) == 0
    assert terrain.next_level(1, walked=4.0, path=5, commanded=5.0, fell=True) == 0
    assert terrain.next_level(1, walked=1.5, path=2, commanded=2.0, fell=False) == 1
    # Out and back: near the start, but along the commanded path: the level stays.
    assert terrain.next_level(1, walked=0.5, path=9, commanded=10.0, fell=False) == 1
    # The scan sees the ground under the feet: about the foot's height above it at reset.
    assert np.abs(obs["height_scan"].reshape(4, 9)[:, 4]).max() < 0.05
    # Harder levels are rougher: the spread of heights grows with the level.
    o = terrain.options
    cells = round(o.cell_size / o.resolution)
    spread = [np.ptp(terrain.heights[:cells, lv * cells : (lv + 1) * cells]) for lv in range(4)]
    assert spread == sorted(spread) and spread[-1] > spread[0]


def test_a_range_of_initial_levels_draws_each_envs_first_level_from_its_terrain_stream():
    from embodied_ppo_envs.quadruped_vector import QuadrupedVectorEnv
    from embodied_ppo_envs.randomization import stream

    options = {"levels": 6, "initial_level": [2, 4]}
    env = gym.make(ROUGH, terrain_options=options)
    inner = env.unwrapped
    first = {}
    for seed in range(30):
        env.reset(seed=seed)
        # By hand: the first draw of the env's terrain generator, then its spawn from the same.
        rng = stream(seed, "terrain")
        level = int(rng.integers(2, 5))
        assert inner.level == level, seed
        x, y, _ = inner.terrain.spawn(level, rng)
        np.testing.assert_allclose(inner.data.qpos[:2], [x, y])
        first[seed] = level
    assert set(first.values()) == {2, 3, 4}  # every level of the range, none outside it
    # Later episodes follow the curriculum; a seeded reset draws the same first level again.
    env.reset(seed=7)
    for _ in range(3):
        env.step(np.zeros(12, np.float32))
        env.reset()
    env.reset(seed=7)
    assert inner.level == first[7]
    # The vector env draws each row's as its single env does.
    vector = QuadrupedVectorEnv(4, terrain="rough", terrain_options=options)
    vector.reset(seed=[3, 4, 5, 6])
    assert [int(v) for v in vector.batch.level] == [first[s] for s in (3, 4, 5, 6)]
    vector.close()
    # One level draws nothing: the spawn is the terrain generator's first draw.
    env = gym.make(ROUGH, terrain_options={"levels": 6, "initial_level": 3})
    env.reset(seed=5)
    x, y, _ = env.unwrapped.terrain.spawn(3, stream(5, "terrain"))
    np.testing.assert_allclose(env.unwrapped.data.qpos[:2], [x, y])
    assert env.unwrapped.level == 3


@pytest.mark.parametrize(
    "value, words",
    [([4, 2], "low <= high"), ([0, 6], "below levels (6)"), ([1, 2, 3], "[low, high]"),
     (-1, ">= 0"), (6, "below levels (6)")],
)  # fmt: skip
def test_a_bad_initial_level_names_its_key(value, words):
    with pytest.raises(TaskConfigError) as info:
        gym.make(ROUGH, terrain_options={"levels": 6, "initial_level": value})
    assert info.value.key == "terrain_options.initial_level"
    assert words in str(info.value)


def test_the_heightfield_is_where_the_terrain_says():
    env = gym.make(ROUGH, terrain_options={"levels": 3})
    inner = env.unwrapped
    m, d = inner.model, inner.data
    mujoco.mj_kinematics(m, d)
    rng = np.random.default_rng(0)
    points = rng.uniform([-6, -12], [6, 12], (20, 2))
    heights = np.zeros(20)
    inner.terrain.height_at(points, heights)
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    # Beyond the map: the flat border, at height 0.
    points = np.concatenate([points, [[-30.0, 0.0], [0.0, 30.0], [25.0, -25.0]]])
    heights = np.concatenate([heights, np.zeros(3)])
    outside = np.zeros(3)
    inner.terrain.height_at(points[-3:], outside)
    np.testing.assert_array_equal(outside, 0.0)
    border = {
        mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"border_{s}")
        for s in ("x+", "x-", "y+", "y-")
    }
    for (x, y), h in zip(points, heights):
        # A ray cast down from above the map hits the heightfield at the terrain's height.
        geomid = np.zeros(1, np.int32)
        start, down = np.array([x, y, 5.0]), np.array([0, 0, -1.0])
        dist = mujoco.mj_ray(m, d, start, down, None, 1, -1, geomid)
        inside = abs(x) < inner.terrain.size_x / 2 and abs(y) < inner.terrain.size_y / 2
        assert geomid[0] == floor if inside else geomid[0] in border
        assert 5.0 - dist == pytest.approx(h, abs=0.06)


@pytest.mark.parametrize(
    "kwargs, key, words",
    [
        ({"rewards": {"traking_lin_vel": 1.0}}, "rewards.traking_lin_vel", "tracking_lin_vel"),
        ({"randomization": {"fricton": [0.5, 1]}}, "randomization.fricton", "'friction'"),
        ({"randomization": {"friction": [1.2, 0.5]}}, "randomization.friction", "low > high"),
        ({"randomization": {"added_mass": [-9, 1]}}, "randomization.added_mass", "positive"),
        ({"action_delay": -1}, "action_delay", ">= 0"),
        ({"commands": {"lin_vel_x": [-1, 3.5]}}, "commands.lin_vel_x", "[-2, 2]"),
        ({"command_schedule": [[0, 0, 0, 5]]}, "command_schedule[0]", "yaw_rate"),
        ({"noise": {"joint_velocity": 1.0}}, "noise.joint_velocity", "'joint_vel'"),
        ({"terrain_options": {"levels": 3}}, "terrain_options", "rough"),
    ],
)
def test_bad_task_arguments_name_their_key(kwargs, key, words):
    with pytest.raises(TaskConfigError) as info:
        gym.make(FLAT, **kwargs)
    assert info.value.key == key
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_the_tasks_are_registered_apart_from_the_arm_tasks():
    for env_id in embodied_ppo_envs.LEGGED_TASKS:
        assert env_id in gym.registry and env_id not in embodied_ppo_envs.TASKS


@pytest.mark.parametrize("thigh_ends_it", [False, True])
def test_knees_on_the_ground_are_collisions_unless_thighs_end_episodes(thigh_ends_it):
    contacts = ["trunk", "hip", "thigh"] if thigh_ends_it else ["trunk", "hip"]
    env = gym.make(FLAT, fall_contacts=contacts, only_positive_rewards=False)
    inner = env.unwrapped
    env.reset(seed=0)
    # Kneeling: thighs straight down, calves folded up, the trunk a knee's length up.
    kneel = np.tile([0.0, 0.0, -2.7], 4) + np.tile([1, 0, 0], 4) * STAND
    inner.data.qpos[2] = 0.23
    inner.data.qpos[3:7] = [1, 0, 0, 0]
    inner.data.qpos[7:] = kneel
    inner.data.qvel[:] = 0
    action = ((kneel - STAND) / ACTION_SCALE).astype(np.float32)
    for _ in range(5):
        _, _, terminated, _, info = env.step(action)
        if terminated:
            break
    assert terminated == thigh_ends_it
    if not thigh_ends_it:
        assert info["log"]["rewards/collision"] < 0  # four knees, counted per leg


def test_zero_prob_zeroes_each_command_component_on_its_own():
    commands = {"resample_s": 0.02, "stand_prob": 0.0, "zero_prob": [0.0, 1.0, 0.5]}
    env = gym.make(FLAT, commands=commands)
    env.reset(seed=0)
    seen = np.array([env.step(np.zeros(12, np.float32))[0]["command"] for _ in range(300)])
    assert np.all(seen[:, 0] != 0) and np.all(seen[:, 1] == 0)
    assert 0.4 < np.mean(seen[:, 2] == 0) < 0.6
