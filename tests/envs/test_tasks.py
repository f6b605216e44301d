"""The project's own tasks (envs/): registration, the env checker, seeding, success, frames."""

from __future__ import annotations

import pickle

import embodied_ppo_envs
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from support import ROOT

TASKS = list(embodied_ppo_envs.TASKS)


@pytest.fixture
def make():
    made = []

    def factory(env_id, **kwargs):
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()


def rollout(env, seed, steps=30):
    """Observations and rewards of `steps` seeded random steps (an ended episode stops them)."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        out += [obs, reward]
        if terminated or truncated:
            break
    return out


def same(a, b) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


def test_ids_are_registered_under_a_name_of_our_own():
    assert embodied_ppo_envs.__name__ == "embodied_ppo_envs"  # not a generic `envs` module
    for env_id in TASKS:
        assert env_id.startswith("EmbodiedPPO/") and env_id in gym.registry


@pytest.mark.filterwarnings("ignore:.*WARN:")  # the checker's advice on infinite Box bounds
@pytest.mark.parametrize("env_id", TASKS)
def test_each_task_passes_gymnasiums_env_checker(env_id, make):
    check_env(make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", TASKS)
def test_each_task_is_seeded(env_id, make):
    a, b, c = rollout(make(env_id), 1), rollout(make(env_id), 1), rollout(make(env_id), 2)
    assert all(same(x, y) for x, y in zip(a, b, strict=True))
    assert not same(a[0], c[0])  # another seed: another target (and block)


@pytest.mark.parametrize("env_id", TASKS)
def test_each_task_renders_rgb_frames(env_id, make):
    # The arms take a frame size; the classic-control tasks draw at their own.
    size = {"width": 96, "height": 80} if env_id in embodied_ppo_envs.ARM_TASKS else {}
    env = make(env_id, render_mode="rgb_array", **size)
    env.reset(seed=0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8 and frame.std() > 5
    assert not size or frame.shape[:2] == (80, 96)


@pytest.mark.parametrize("env_id", list(embodied_ppo_envs.ARM_TASKS))
def test_arm_tasks_pass_camera_keywords_to_mujoco_and_refuse_unknown_ones(env_id, make):
    size = {"render_mode": "rgb_array", "width": 64, "height": 64}
    default = make(env_id, **size)
    top = make(env_id, camera_name="top", **size)
    for env in (default, top):
        env.reset(seed=0)
    assert not np.array_equal(default.render(), top.render())  # another camera, another frame
    # A pickled env is rebuilt with the camera (and the task's own arguments).
    clone = pickle.loads(pickle.dumps(top.unwrapped))
    made = [clone]
    clone.reset(seed=0)
    assert np.array_equal(clone.render(), top.render())
    assert clone.success_distance == top.unwrapped.success_distance
    if env_id.startswith("EmbodiedPPO/ReachPixels"):
        small = make(env_id, image_size=32)
        again = pickle.loads(pickle.dumps(small.unwrapped))
        made.append(again)
        assert again.reset(seed=0)[0]["image"].shape == (32, 32, 3)
    for env in made:
        env.close()
    with pytest.raises(TypeError, match="no_such_option"):
        gym.make(env_id, no_such_option=1)


@pytest.mark.parametrize("env_id, limit", [(TASKS[0], 100), (TASKS[1], 150), (TASKS[2], 100)])
def test_episodes_end_at_the_time_limit_with_is_success(env_id, limit, make):
    env = make(env_id)
    env.reset(seed=0)
    for t in range(limit):
        _, _, terminated, truncated, info = env.step(np.zeros(3, dtype=np.float32))
        assert not terminated and truncated == (t == limit - 1)
        assert info["is_success"] in (0.0, 1.0) and info["distance"] >= 0.0


def test_reach_success_and_reward_follow_the_distance(make):
    env = make("EmbodiedPPO/Reach-v0").unwrapped
    env.reset(seed=0)
    # Put the target on the fingertip: success, and the bonus outweighs the distance term.
    env.set_target(env.fingertip())
    _, reward, _, _, info = env.step(np.zeros(3))
    assert info["is_success"] == 1.0 and info["distance"] < 0.02 and reward > 0.9
    env.set_target(env.fingertip() + np.array([0.1, 0.0]))
    _, reward, _, _, info = env.step(np.zeros(3))
    assert info["is_success"] == 0.0 and reward == pytest.approx(-info["distance"], abs=1e-9)


def test_push_moves_the_block_by_contact(make):
    env = make("EmbodiedPPO/Push-v0").unwrapped
    for seed in range(3):
        env.reset(seed=seed)
        start = env.block()
        # Swing the curled arm round through the block's side of the table: the links sweep it.
        toward_front = -np.sign(env.data.qpos[0])
        for _ in range(50):
            env.step(np.array([toward_front, 0.0, 0.0]))
        assert np.linalg.norm(env.block() - start) > 0.05
        # Slid, not tipped: its centre is still at half its height above the table.
        assert abs(env.data.xpos[env.block_body, 2] - 0.03) < 0.002


def test_push_arm_starts_folded_behind_the_base_on_either_side(make):
    env = make("EmbodiedPPO/Push-v0").unwrapped
    shoulders = []
    for seed in range(40):
        env.reset(seed=seed)
        shoulders.append(env.data.qpos[0])
        # Folded behind the base, clear of the block in front of it.
        assert env.fingertip()[0] < 0.05
        assert np.linalg.norm(env.fingertip() - env.block()) > 0.1
    shoulders = np.array(shoulders)
    assert np.all(np.abs(np.abs(shoulders) - 2.8) <= 0.1 + 1e-9)
    assert 10 <= np.sum(shoulders > 0) <= 30  # both sides, about half each


def test_push_shoulder_turns_past_the_stop_that_reach_keeps(make):
    # Push's arm starts folded at shoulder ~+-2.8 rad; turning on round the back (through pi)
    # is how it reaches the block's far side without squeezing past the block. Reach keeps
    # the +-3 rad stop of arm_common.xml.
    for env_id, free in (("EmbodiedPPO/Push-v0", True), ("EmbodiedPPO/Reach-v0", False)):
        env = make(env_id).unwrapped
        env.reset(seed=0)
        q = env.data.qpos.copy()
        q[0] = 2.8
        env.set_state(q, np.zeros_like(env.data.qvel))
        for _ in range(40):
            env.step(np.array([1.0, 0.0, 0.0]))
        shoulder = env.data.qpos[0]
        assert (shoulder > 3.5) if free else (shoulder < 3.05), (env_id, shoulder)


def test_push_rewards_the_fingertip_behind_the_block_on_the_side_away_from_the_goal(make):
    env = make("EmbodiedPPO/Push-v0").unwrapped
    rewards = {}
    for side in ("beyond", "between"):
        env.reset(seed=0)
        # Put the block 7 cm from the fingertip, away from the base.
        tip = env.fingertip()
        away = tip / np.linalg.norm(tip)
        q, v = env.data.qpos.copy(), env.data.qvel.copy()
        q[3:5] = block = tip + 0.07 * away
        env.set_state(q, v)
        # "beyond": the goal on the block's far side from the fingertip, which is then behind
        # the block; "between": the goal between them, the pushing point on the far side.
        goal = block + 0.1 * away if side == "beyond" else block - 0.1 * away
        env.set_target(goal, z=0.001)
        push = env.push_point()
        assert np.linalg.norm(push - block) == pytest.approx(0.05)
        assert np.linalg.norm(push - goal) == pytest.approx(0.15, abs=1e-6)  # behind the block
        obs, rewards[side], _, _, info = env.step(np.zeros(3))
        assert np.allclose(obs[-2:], env.fingertip() - env.push_point(), atol=1e-6)
        assert info["distance"] == pytest.approx(0.1, abs=1e-3) and info["is_success"] == 0.0
    # Same block-goal distance: only the reaching term differs, and it favours pushing from
    # the side away from the goal.
    assert rewards["beyond"] > rewards["between"] + 0.05


def test_reach_pixels_sees_the_target_and_keeps_privileged_state_apart(make):
    env = make("EmbodiedPPO/ReachPixels-v0")
    obs, _ = env.reset(seed=0)
    image = obs["image"]
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    red = (image[..., 0] > 180) & (image[..., 1] < 90) & (image[..., 2] < 90)
    assert red.sum() >= 3  # the target ball
    tip_target = obs["privileged"]
    assert tip_target.shape == (4,) and obs["proprio"].shape == (9,)
    # The privileged target position is where the image shows the ball: move it, the image moves.
    env.unwrapped.set_target(-tip_target[2:])
    moved = env.unwrapped._get_obs()
    assert not np.array_equal(moved["image"], image)


def test_reach_pixels_camera_draws_a_coarse_copy_of_the_scene(make):
    from embodied_ppo_envs.reach_pixels import CAMERA_SLICES, TABLE_GRID, camera_model

    env = make("EmbodiedPPO/ReachPixels-v0")
    model = env.unwrapped.model
    camera = camera_model(model, 64)
    table = int(np.flatnonzero(model.geom_type == 0)[0])  # the plane
    assert (
        camera.geom_size[table, 2] == TABLE_GRID and camera.vis.quality.numslices == CAMERA_SLICES
    )
    assert camera.vis.global_.offwidth == 64 and camera.vis.quality.offsamples == 0
    # The env's own model (physics, videos) is untouched: a 2 cm grid, fine spheres.
    assert model.geom_size[table, 2] == pytest.approx(0.02) and model.vis.quality.numslices > 12
    # The same physical scene: only drawing settings differ.
    assert np.array_equal(camera.geom_size[:table], model.geom_size[:table])
    assert np.array_equal(camera.geom_rgba, model.geom_rgba)


@pytest.mark.parametrize("given, expected", [(None, "0"), ("3", "3")])
def test_reach_pixels_turns_off_the_software_renderers_threads_unless_told(given, expected):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LP_NUM_THREADS"}
    if given is not None:
        env["LP_NUM_THREADS"] = given
    code = (
        "import os, gymnasium as gym, embodied_ppo_envs\n"
        "e = gym.make('EmbodiedPPO/ReachPixels-v0'); e.reset(seed=0)\n"
        "print(os.environ.get('LP_NUM_THREADS')); e.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [expected]


def test_task_frames_films_a_trained_policy_as_a_strip(tmp_path):
    """scripts/task_frames.py: the policy of a run drives the task, K frames side by side."""
    import io
    import subprocess
    import sys

    import imageio.v3 as iio

    import embodied_ppo

    root = ROOT
    run = tmp_path / "run"
    cfg = {"env": {"id": "Hopper-v5", "num_envs": 2}, "model": {"hidden_sizes": [8]}}
    cfg["algorithm"] = {"rollout_steps": 16, "update_epochs": 1, "minibatch_size": 32}
    cfg["trainer"] = {"total_steps": 32, "compile": False, "device": "cpu"}
    embodied_ppo.train(cfg, run_dir=run, progress=io.StringIO())

    def strip(*args):
        out = tmp_path / args[-1]
        cmd = [sys.executable, "scripts/task_frames.py", "--env", "Hopper-v5", "--out", str(out)]
        proc = subprocess.run([*cmd, *args[:-1]], cwd=root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return iio.imread(out / "hopper.png")

    policy = strip("--run", f"Hopper-v5={run}", "--steps", "4", "--strip", "3", "--gap", "2", "a")
    assert policy.shape == (240, 3 * 320, 3)
    frames = np.split(policy, 3, axis=1)
    assert not np.array_equal(frames[0], frames[2])  # the body moved between the frames
    # The same strip without the run is the untrained task from its reset state.
    reset = strip("--steps", "4", "--strip", "3", "--gap", "2", "b")
    assert not np.array_equal(reset, policy)
    # --camera names one of the model's cameras: Hopper's "track" follows the body, nearer.
    tracked = strip("--run", f"Hopper-v5={run}", "--steps", "4", "--strip", "3", "--gap", "2",
                    "--camera", "track", "c")  # fmt: skip
    assert tracked.shape == policy.shape and not np.array_equal(tracked, policy)
    # --set passes a task argument: with more reset noise Hopper starts in another pose.
    noisy = strip("--steps", "4", "--strip", "3", "--gap", "2",
                  "--set", "reset_noise_scale=0.05", "d")  # fmt: skip
    assert noisy.shape == reset.shape and not np.array_equal(noisy, reset)
