"""A tiny quadruped policy: the actor reads the robot's sensors only, and the deploy script
(onnxruntime and mujoco, nothing of ours) acts as the trained policy does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from embodied_ppo_envs.quadruped_observations import ACTOR_KEYS

import embodied_ppo

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "env.num_envs=2",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=32",
    "trainer.total_steps=64",
    "trainer.compile=false",
    "trainer.device=cpu",
    "model.hidden_sizes=[16]",
]

# Runs the deploy script in a fresh interpreter and fails if anything of ours was imported.
RUNNER = """
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
ours = sorted(m for m in sys.modules if m.split(".")[0] in ("embodied_ppo", "embodied_ppo_envs"))
assert not ours, f"the deploy script imported {ours}"
"""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("quadruped") / "run"
    embodied_ppo.train(ROOT / "configs" / "quadruped_flat.yaml", TINY, run_dir=run)
    return run


def test_the_policy_takes_the_six_sensor_keys_only(tiny_run):
    policy = embodied_ppo.load_policy(tiny_run)
    assert set(policy.metadata["observation"]["keys"]) == set(ACTOR_KEYS)
    assert set(policy.net.keys) == set(ACTOR_KEYS)
    config = (tiny_run / "config.yaml").read_text()
    assert "height_scan" in config  # the critic did read the privileged keys


def test_the_deploy_script_acts_as_the_trained_policy(tiny_run, tmp_path):
    onnx, meta_path, _ = embodied_ppo.export(tiny_run, "onnx", tmp_path / "policy.onnx")
    assert set(json.loads(meta_path.read_text())["input_names"]) == set(ACTOR_KEYS)
    record = tmp_path / "run.npz"
    script = ROOT / "examples" / "deploy" / "quadruped.py"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(script), str(onnx), "--seconds", "2",
         "--schedule", "0,0.8,0,0", "1,0,0,0.5", "5,0,0,0", "--noise", "joint_vel=1.5",
         "--delay", "1", "--record", str(record)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "inference latency: p50" in done.stdout and "p99" in done.stdout
    # The measured velocity per command of the schedule; the run ends before the third.
    assert "from 0 s: measured" in done.stdout and "from 1 s: measured" in done.stdout
    assert "from 5 s" not in done.stdout
    data = np.load(record)
    assert data["action"].shape == (100, 12)  # 2 s at 50 Hz
    # The schedule reached the policy: 0.8 m/s forward, then a turn from 1 s.
    np.testing.assert_allclose(data["command"][[0, 49, 50, 99]], [[0.8, 0, 0], [0.8, 0, 0],
                               [0, 0, 0.5], [0, 0, 0.5]], atol=1e-6)  # fmt: skip
    policy = embodied_ppo.load_policy(tiny_run)
    actions = policy({k: data[k] for k in ACTOR_KEYS})
    np.testing.assert_allclose(data["action"], actions, rtol=1e-5, atol=1e-5)
    assert np.abs(actions).max() > 1e-3  # a real policy's output, not zeros
    # The previous action is the observed one; with a delay of 1 the motors lag a step.
    np.testing.assert_array_equal(data["last_action"][1:], data["action"][:-1])
