"""Pixels on a headless machine: with MUJOCO_GL, PYOPENGL_PLATFORM and DISPLAY unset, the
pixel task trains from the command line, from Python and in env worker processes, and a user
makes it with gymnasium.make; a user's own rendering env trains too, or fails in one line that
says which MUJOCO_GL to set."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT

from embodied_ppo.io.render import egl_device_initializes, probe_backend

# A few hundred steps of the pixel task: one iteration.
TINY = [
    "env.num_envs=2",
    "env.processes=1",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=32",
    "algorithm.update_epochs=1",
    "trainer.total_steps=32",
    "trainer.eval_interval=null",
    "trainer.compile=false",
    "model.hidden_sizes=[16]",
    "model.cnn_features=16",
]

pytestmark = pytest.mark.skipif(
    not (egl_device_initializes() or probe_backend("egl") or probe_backend("osmesa")),
    reason="this machine has neither EGL nor OSMesa: nothing can render headless",
)


def headless_env() -> dict[str, str]:
    """This process's environment without any choice of OpenGL platform or display."""
    drop = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "embodied_ppo", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=headless_env(), timeout=600
    )


@pytest.mark.parametrize("processes", [1, 2])
def test_the_pixel_task_trains_headless_from_the_command_line(tmp_path, processes):
    run_dir = tmp_path / "run"
    out = run("train", "configs/reach_pixels.yaml", *TINY, f"env.processes={processes}",
              f"trainer.run_dir={run_dir}")  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run_dir / "checkpoints" / "latest.pt").is_file()


def test_the_pixel_task_trains_headless_from_python(tmp_path):
    code = (
        "import embodied_ppo\n"
        f"r = embodied_ppo.train('configs/reach_pixels.yaml', {TINY!r}, {str(tmp_path / 'r')!r})\n"
        "print(r.global_step)\n"
    )
    out = run(code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "32"


def test_a_user_makes_the_pixel_task_headless_with_gymnasium():
    code = (
        "import gymnasium as gym, embodied_ppo_envs\n"
        "env = gym.make('EmbodiedPPO/ReachPixels-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(obs['image'].shape, int(obs['image'].max()) > 0)\n"
        "env.close()\n"
    )
    out = run(code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "(64, 64, 3) True"


def test_a_users_env_rendering_its_observations_trains_headless(tmp_path):
    # Gymnasium's own wrapper: the rendered frame becomes the "pixels" key of a Dict.
    run_dir = tmp_path / "run"
    out = run(
        "train", "configs/pendulum.yaml", "env.id=InvertedPendulum-v5",
        "env.kwargs={render_mode: rgb_array, width: 64, height: 64}",
        "env.wrappers=[{name: AddRenderObservation, kwargs: {render_only: false}}]",
        *TINY, f"trainer.run_dir={run_dir}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run_dir / "checkpoints" / "latest.pt").is_file()


def test_a_render_failure_says_which_mujoco_gl_to_set(tmp_path):
    # MuJoCo imported, and GLFW chosen by it, before the run: the failure names the fix.
    code = (
        "import os\n"
        "os.environ['MUJOCO_GL'] = 'glfw'\n"  # what MuJoCo takes without a choice: no display
        "import embodied_ppo\n"
        "from embodied_ppo.core.errors import UserError\n"
        "try:\n"
        f"    embodied_ppo.train('configs/reach_pixels.yaml', {TINY!r}, {str(tmp_path / 'r')!r})\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
    )
    out = run(code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    assert "environment 0 raised" in line and "MUJOCO_GL" in line, line
