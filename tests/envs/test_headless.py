"""Pixels on a headless machine: with MUJOCO_GL, PYOPENGL_PLATFORM and DISPLAY unset, the
pixel task trains from the command line, from Python and in env worker processes, and a user
makes it with gymnasium.make; a user's own rendering env trains too, or fails in one line that
says which MUJOCO_GL to set. Each training writes its checkpoint, and an env wrapper records
what the policy was shown: pictures, none black, and moving."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ROOT

from embodied_ppo.io.checkpoint import load_checkpoint
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


# An env wrapper (env.wrappers) that writes a line for every image observation its env gives
# (in whichever process steps the env): what the policy was shown, without changing it.
PROBE = """
import hashlib, os
import gymnasium as gym
import numpy as np


class ImageProbe(gym.ObservationWrapper):
    def __init__(self, env, path, key):
        super().__init__(env)
        self.key = key
        self.file = open(os.path.join(path, f"{os.getpid()}-{id(self)}.txt"), "a", buffering=1)

    def observation(self, obs):
        image = np.asarray(obs[self.key])
        digest = hashlib.sha1(image.tobytes()).hexdigest()
        self.file.write(f"{digest} {int(image.max())} {float(image.std()):.3f}\\n")
        return obs
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    """The folder the probe writes into; its module is importable by the commands run here."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "image_probe.py").write_text(textwrap.dedent(PROBE))
    (tmp_path / "seen").mkdir()
    return tmp_path / "seen"


def probe_wrapper(seen: Path, key: str = "image") -> str:
    """The env.wrappers entry of the probe."""
    return f"{{name: image_probe:ImageProbe, kwargs: {{path: {seen}, key: {key}}}}}"


def assert_real_pictures(seen: Path, envs: int, steps: int) -> None:
    """Each of the `envs` envs that trained showed the policy pictures: none black or flat, and
    a sequence that changes (the arm or pole moves), not one frame frozen."""
    trained = []
    for path in seen.glob("*.txt"):
        lines = [line.split() for line in path.read_text().splitlines()]
        if len(lines) > steps:  # the reset and every step of the run (not the preflight's env)
            trained.append(lines)
    assert len(trained) == envs, [len(x) for x in trained]
    for lines in trained:
        assert all(int(top) > 0 and float(std) > 1.0 for _, top, std in lines), lines
        changed = sum(a[0] != b[0] for a, b in zip(lines, lines[1:], strict=False))
        assert changed >= 0.9 * (len(lines) - 1), f"{changed} of {len(lines) - 1} frames changed"


def headless_env(src: Path | None = None) -> dict[str, str]:
    """This process's environment without any choice of OpenGL platform or display (with
    `src` on the Python path)."""
    drop = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONWARNINGS"] = "ignore"
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(
    *args: str, code: str | None = None, src: Path | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "embodied_ppo", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=headless_env(src), timeout=600
    )


@pytest.mark.parametrize("processes", [1, 2])
def test_the_pixel_task_trains_headless_from_the_command_line(tmp_path, probe, processes):
    run_dir = tmp_path / "run"
    out = run("train", "configs/reach_pixels.yaml", *TINY, f"env.processes={processes}",
              f"env.wrappers=[{probe_wrapper(probe)}]", f"trainer.run_dir={run_dir}",
              src=tmp_path / "src")  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert load_checkpoint(run_dir)["global_step"] == 32
    assert_real_pictures(probe, envs=2, steps=16)


def test_the_pixel_task_trains_headless_from_python(tmp_path, probe):
    overrides = [*TINY, f"env.wrappers=[{probe_wrapper(probe)}]"]
    code = (
        "import embodied_ppo\n"
        f"r = embodied_ppo.train('configs/reach_pixels.yaml', {overrides!r}, "
        f"{str(tmp_path / 'r')!r})\n"
        "print(r.global_step)\n"
    )
    out = run(code=code, src=tmp_path / "src")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "32"
    assert load_checkpoint(tmp_path / "r")["global_step"] == 32
    assert_real_pictures(probe, envs=2, steps=16)


def test_a_user_makes_the_pixel_task_headless_with_gymnasium():
    # Ten random steps: every image a picture, and the arm seen moving.
    code = (
        "import hashlib\n"
        "import gymnasium as gym, embodied_ppo_envs\n"
        "env = gym.make('EmbodiedPPO/ReachPixels-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "env.action_space.seed(0)\n"
        "images = [obs['image']]\n"
        "for _ in range(10):\n"
        "    images.append(env.step(env.action_space.sample())[0]['image'])\n"
        "print(obs['image'].shape, min(float(i.std()) for i in images),\n"
        "      len({hashlib.sha1(i.tobytes()).hexdigest() for i in images}))\n"
        "env.close()\n"
    )
    out = run(code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    shape, spread, distinct = out.stdout.strip().rsplit(" ", 2)
    assert shape == "(64, 64, 3)" and float(spread) > 1.0 and int(distinct) == 11, out.stdout


def test_a_users_env_rendering_its_observations_trains_headless(tmp_path, probe):
    # Gymnasium's own wrapper: the rendered frame becomes the "pixels" key of a Dict.
    run_dir = tmp_path / "run"
    wrappers = "{name: AddRenderObservation, kwargs: {render_only: false}}, " + probe_wrapper(
        probe, "pixels"
    )
    out = run(
        "train", "configs/pendulum.yaml", "env.id=InvertedPendulum-v5",
        "env.kwargs={render_mode: rgb_array, width: 64, height: 64}",
        f"env.wrappers=[{wrappers}]", *TINY, f"trainer.run_dir={run_dir}",
        src=tmp_path / "src",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert load_checkpoint(run_dir)["global_step"] == 32
    assert_real_pictures(probe, envs=2, steps=16)


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


def _check_env_recording(monkeypatch, env: dict, aged: bool = False):
    """Runs the checks on `env` with automatic collection off (what the collector would free
    later does not count); returns a weak reference to the env they built and the generations
    of the collections they ran. `aged`: a full collection first moves the env, wrappers and
    all, into the oldest generation, as a long build in a busy process would."""
    import gc
    import weakref

    from embodied_ppo.config.building import from_dict
    from embodied_ppo.vecenv import preflight

    made, generations = [], []
    make_one, describe = preflight.make_one, preflight.describe_spaces

    def spy_make(*args, **kwargs):
        env = make_one(*args, **kwargs)
        made.append(weakref.ref(env.unwrapped))
        return env

    def spy_describe(*args):
        if aged:
            gc.collect()
        return describe(*args)

    def record(phase, info):
        if phase == "start":
            generations.append(info["generation"])

    monkeypatch.setattr(preflight, "make_one", spy_make)
    monkeypatch.setattr(preflight, "describe_spaces", spy_describe)
    gc.disable()
    gc.callbacks.append(record)
    try:
        preflight.check_env(from_dict({"env": env}))
    finally:
        gc.callbacks.remove(record)
        gc.enable()
    assert len(made) == 1
    return made[0], generations[1:] if aged else generations


@pytest.mark.parametrize("aged", [False, True], ids=["young", "aged"])
def test_the_preflight_env_is_freed_before_the_training_envs_exist(monkeypatch, aged):
    """The env the checks build is gone when they return, not when the garbage collector gets
    to it: a MuJoCo renderer frees its GL context again when collected, releasing whichever
    context is current then, and training envs made after it in the same process would render
    black frames. With Gymnasium's AddRenderObservation the env sits in a reference cycle, which
    a collection of the young generations frees, or a full one once the env has aged."""
    wrapper = {"name": "AddRenderObservation", "kwargs": {"render_only": False}}
    kwargs = {"render_mode": "rgb_array", "width": 64, "height": 64}
    env = {"id": "InvertedPendulum-v5", "kwargs": kwargs, "wrappers": [wrapper]}
    made, generations = _check_env_recording(monkeypatch, env, aged)
    assert made() is None
    assert generations == ([1, 2] if aged else [1])


def test_an_env_in_no_cycle_is_freed_without_a_collection(monkeypatch):
    """Most envs go with their last reference: the checks then run no collection (a full one
    costs ~0.1 s once torch is loaded, in every command that trains)."""
    made, generations = _check_env_recording(monkeypatch, {"id": "InvertedPendulum-v5"})
    assert made() is None and generations == []
