"""Videos of each of the project's tasks show the scene in every frame: on a headless machine
(MUJOCO_GL unset, no display), filmed by evaluation during training and by `embodied-ppo eval`,
and in a user's own loop; and a script that never closes its env exits without GL noise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import ROOT

from embodied_ppo.io.render import egl_device_initializes, probe_backend

pytestmark = pytest.mark.skipif(
    not (egl_device_initializes() or probe_backend("egl") or probe_backend("osmesa")),
    reason="this machine has neither EGL nor OSMesa: nothing can render headless",
)

# Each task's own config, trained for one iteration of 2 envs x 16 steps with short episodes,
# evaluated and filmed after it.
CONFIGS = {
    "EmbodiedPPO/Reach-v0": "reach.yaml",
    "EmbodiedPPO/Push-v0": "push.yaml",
    "EmbodiedPPO/ReachPixels-v0": "reach_pixels.yaml",
    "EmbodiedPPO/CartPoleNoVel-v1": "cartpole_pomdp.yaml",
    "EmbodiedPPO/PendulumNoVel-v1": "pendulum_pomdp.yaml",
    "EmbodiedPPO/QuadrupedFlat-v0": "quadruped_flat.yaml",
    "EmbodiedPPO/QuadrupedRough-v0": "quadruped_rough.yaml",
}
EPISODE = 12  # the longest episode (env.max_episode_steps): 13 frames, the reset's and 12 more
TINY = [
    "env.num_envs=2",
    "env.processes=1",
    "env.threads=1",
    f"env.max_episode_steps={EPISODE}",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=32",
    "algorithm.update_epochs=1",
    "algorithm.sequence_length=null",  # the recurrent configs cut rollouts into 32 steps
    "trainer.total_steps=32",
    "trainer.eval_interval=1",
    "trainer.eval_episodes=1",
    "trainer.video_interval=1",
    "trainer.compile=false",
    "trainer.torch_threads=1",
]


def headless_env() -> dict[str, str]:
    drop = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "embodied_ppo", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=headless_env(), timeout=600
    )


def read_video(path: Path) -> list[np.ndarray]:
    import imageio.v2 as imageio

    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        return [np.asarray(frame) for frame in reader]
    finally:
        reader.close()


def assert_every_frame_shows_the_scene(frames: list[np.ndarray], lengths: list[int]) -> None:
    """No black frame, and no frame that repeats the one before it (a frozen picture).

    A video holds, for each episode (of `lengths` steps), its reset's frame and one after each
    step; each step moves something in view (the untrained policy acts, the robot or the pole
    moves under it).
    """
    assert len(frames) == sum(lengths) + len(lengths), (len(frames), lengths)
    resets = set(np.cumsum([0] + [n + 1 for n in lengths[:-1]]).tolist())
    for i, frame in enumerate(frames):
        assert frame.ndim == 3 and frame.shape[2] == 3
        # A blank frame is one colour: its pixels do not spread (the bug drew all zeros).
        assert frame.std() > 5 and frame.mean() > 10, f"frame {i} is blank (mean {frame.mean()})"
    for i in range(1, len(frames)):
        if i in resets:
            continue  # a reset's frame follows the last of the episode before
        change = np.abs(frames[i].astype(np.int16) - frames[i - 1].astype(np.int16)).mean()
        assert change > 0, f"frame {i} repeats frame {i - 1}: the picture froze"


@pytest.mark.parametrize("task", list(CONFIGS))
def test_each_tasks_training_and_eval_videos_show_the_scene_in_every_frame(task, tmp_path):
    run_dir = tmp_path / "run"
    out = run("train", f"configs/{CONFIGS[task]}", *TINY, f"trainer.run_dir={run_dir}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    # Evaluation during training filmed its one episode.
    (trained,) = sorted((run_dir / "videos").glob("eval-step*.mp4"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    length = int(records[-1]["eval/episodic_length"])
    assert_every_frame_shows_the_scene(read_video(trained), [length])

    video = tmp_path / "eval.mp4"
    out = run("eval", str(run_dir), "--episodes", "2", "--video", str(video))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == ""  # a clean exit: no EGL traceback while Python shuts down
    lengths = json.loads((run_dir / "eval.json").read_text())["lengths"]
    assert len(lengths) == 2 and max(lengths) <= EPISODE
    assert_every_frame_shows_the_scene(read_video(video), lengths)


@pytest.mark.parametrize("task", ["EmbodiedPPO/ReachPixels-v0", "EmbodiedPPO/QuadrupedFlat-v0"])
def test_a_users_own_loop_renders_every_step_and_exits_cleanly_without_close(task):
    """gymnasium.make with render_mode, steps and render(), no close(), no MUJOCO_GL set."""
    code = (
        "import gymnasium as gym, numpy as np, embodied_ppo\n"
        f"env = gym.make({task!r}, render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "frames = [env.render()]\n"
        "for _ in range(5):\n"
        "    env.step(env.action_space.sample())\n"
        "    frames.append(env.render())\n"
        "print([round(float(f.mean()), 1) for f in frames])\n"
        "print(all(float(np.abs(a.astype(int) - b).mean()) > 0 for a, b in zip(frames, frames[1:])))\n"
    )
    out = run(code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    means, moved = out.stdout.strip().splitlines()[-2:]
    assert min(json.loads(means)) > 10, means  # no black frame after a step
    assert moved == "True"
    assert out.stderr == ""  # no EGLError traceback at exit, though the env was never closed
