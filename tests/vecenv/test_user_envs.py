"""Users' own envs through the command line: `module:EnvId`, env.imports, env.wrappers, and the
refusals (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
from conftest import TINY, tiny_config
from support import ROOT

from embodied_ppo.config.schema import WrapperConfig
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.vecenv.make import make_one

ROBOT = '''
"""A user's own env module: registers MyRobot-v0 when imported."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MyRobot(gym.Env):
    def __init__(self, channels_first=False):
        self.observation_space = spaces.Box(-5.0, 5.0, (3,), np.float32)
        if channels_first:  # a camera the policy cannot take as it is
            self.observation_space = spaces.Dict(
                {"camera": spaces.Box(0, 255, (3, 32, 32), np.uint8)}
            )
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.x = np.zeros(3, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), {}

    def _obs(self):
        if isinstance(self.observation_space, spaces.Dict):
            return {"camera": np.zeros((3, 32, 32), np.uint8)}
        return self.x.copy()

    def step(self, action):
        self.x = np.clip(self.x + 0.1 * float(action[0]), -5, 5).astype(np.float32)
        return self._obs(), -float(np.abs(self.x).sum()), False, False, {"is_success": 0.0}


class AddOne(gym.ObservationWrapper):
    def observation(self, obs):
        return obs + 1.0


class Double(gym.ObservationWrapper):
    def observation(self, obs):
        return obs * 2.0


gym.register("MyRobot-v0", entry_point=MyRobot, max_episode_steps=10)
'''


@pytest.fixture
def robot(tmp_path, monkeypatch):
    """my_robot.py, importable here (sys.path) and in subprocesses (PYTHONPATH)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "my_robot.py").write_text(textwrap.dedent(ROBOT))
    (src / "broken_robot.py").write_text("1 / 0\n")  # a module that fails while importing
    monkeypatch.syspath_prepend(str(src))
    return src


def cli(src, *args):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, "-m", "embodied_ppo", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip


def assert_user_error(proc, fragment, run):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embodied-ppo: error:"), proc.stderr
    assert fragment in lines[0], lines[0]
    assert not run.exists()  # nothing written


@pytest.mark.parametrize(
    "how", [["env.id=my_robot:MyRobot-v0"], ["env.id=MyRobot-v0", "env.imports=[my_robot]"]]
)
def test_train_eval_export_and_resume_a_users_env(robot, tmp_path, how):
    run = tmp_path / "run"
    tiny = [o for o in TINY if not o.startswith("trainer.total_steps")]
    out = cli(robot, "train", "configs/pendulum.yaml", *tiny, *how, "trainer.total_steps=32",
              f"trainer.run_dir={run}")  # fmt: skip
    assert out.returncode == 0, out.stderr
    out = cli(robot, "train", "--resume", run, "trainer.total_steps=64")
    assert out.returncode == 0 and "resuming" in out.stdout, out.stderr
    assert load_checkpoint(run)["global_step"] == 64
    out = cli(robot, "eval", run, "--episodes", "2")
    assert out.returncode == 0, out.stderr
    assert json.loads((run / "eval.json").read_text())["success_rate"] == 0.0
    out = cli(robot, "export", run, "--format", "torchscript")
    assert out.returncode == 0, out.stderr


def test_wrappers_apply_in_order(robot):
    cfg = tiny_config("MyRobot-v0", env={"imports": ["my_robot"]}).env
    plain = make_one(cfg)
    x, _ = plain.reset(seed=0)
    both = [WrapperConfig("my_robot:AddOne"), WrapperConfig("my_robot:Double")]
    obs, _ = make_one(replace(cfg, wrappers=both)).reset(seed=0)
    assert np.allclose(obs, (x + 1.0) * 2.0)  # AddOne first, then Double around it
    obs, _ = make_one(replace(cfg, wrappers=both[::-1])).reset(seed=0)
    assert np.allclose(obs, x * 2.0 + 1.0)
    gym_wrapper = [WrapperConfig("TimeAwareObservation")]  # a Gymnasium wrapper, by name
    obs, _ = make_one(replace(cfg, wrappers=gym_wrapper)).reset(seed=0)
    assert obs.shape == (4,) and obs[-1] == 0.0


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            ["env.id=MyRobot-v0", "env.imports=[my_robot, no_such_module]"],
            "env.imports[1]: no module named 'no_such_module': Python finds modules in the "
            "current directory and on PYTHONPATH",
        ),
        (
            ["env.id=no_such_module:MyRobot-v0"],
            "env.id: no module named 'no_such_module': Python finds modules",
        ),
        (
            ["env.id=MyRobot-v0"],  # registered by my_robot, which nothing imports
            "; if your own module registers it, name the module: env.imports=[my_module]",
        ),
        (
            ["env.id=my_robot:MyRobot-v0", "env.imports=[broken_robot]"],
            "env.imports[0]: cannot import 'broken_robot' (ZeroDivisionError: division by zero)",
        ),
        (
            ["env.id=my_robot:MyRobot-v9"],
            "env.id: unknown environment 'MyRobot-v9' (after importing 'my_robot'); did you mean 'MyRobot-v0'",
        ),
        (
            ["env.id=my_robot:MyRobot-v0", "env.wrappers=[{name: FlattenObservaton}]"],
            "env.wrappers[0].name: unknown wrapper 'FlattenObservaton'",
        ),
        (
            ["env.id=my_robot:MyRobot-v0", "env.wrappers=[{name: 'my_robot:Nothing'}]"],
            "env.wrappers[0].name: unknown wrapper 'my_robot:Nothing'",
        ),
        (
            ["env.id=my_robot:MyRobot-v0", "env.kwargs={channels_first: true}"],
            "images must be (height, width, channels) uint8, channels last",
        ),
        (
            ["env.id=my_robot:MyRobot-v0", "model.critic_obs_keys=[camera]"],
            "model.critic_obs_keys: got ['camera'], but my_robot:MyRobot-v0 has flat Box observations",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(robot, tmp_path, overrides, fragment):
    run = tmp_path / "run"
    out = cli(robot, "train", "configs/pendulum.yaml", *TINY, *overrides, f"trainer.run_dir={run}")
    assert_user_error(out, fragment, run)


def test_a_wrong_critic_key_of_a_dict_task_is_named(tmp_path):
    run = tmp_path / "run"
    out = cli(tmp_path, "train", "configs/reach_pixels.yaml", *TINY,
              "model.critic_obs_keys=[proprio, privilegd]", f"trainer.run_dir={run}")  # fmt: skip
    assert_user_error(
        out, "model.critic_obs_keys[1]: got 'privilegd', the observation keys of "
        "EmbodiedPPO/ReachPixels-v0 are image, privileged, proprio; did you mean 'privileged'?", run,
    )  # fmt: skip
