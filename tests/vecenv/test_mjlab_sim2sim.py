"""Sim-to-sim: examples/deploy/mjlab_velocity.py runs an exported mjlab policy in plain MuJoCo.
For the same MuJoCo state, its observation equals mjlab's term by term and the control it
applies equals mjlab's, for the Go1 and the G1; bad input is one line and exit status 2. CPU, a
policy trained for a few steps (the loop's arithmetic does not depend on its skill); needs the
mjlab extra."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from support import ROOT

SCRIPT = ROOT / "examples" / "deploy" / "mjlab_velocity.py"
TASKS = {"go1": "Mjlab-Velocity-Flat-Unitree-Go1", "g1": "Mjlab-Velocity-Flat-Unitree-G1"}


@pytest.fixture(scope="module")
def mjlab():
    return pytest.importorskip("mjlab")


@pytest.fixture(scope="module")
def loop_module():
    spec = importlib.util.spec_from_file_location("mjlab_velocity", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(task: str) -> dict:
    return {
        "env": {"id": task, "backend": "mjlab", "num_envs": 2, "max_episode_steps": 50},
        "model": {
            "hidden_sizes": [16],
            "actor_obs_keys": ["actor"],
            "critic_obs_keys": ["critic"],
            "share_backbone": False,
        },  # fmt: skip
        "algorithm": {"rollout_steps": 8, "update_epochs": 1, "minibatch_size": 16},
        "trainer": {"total_steps": 16, "seed": 0, "device": "cpu", "compile": False},
    }


@pytest.fixture(scope="module", params=sorted(TASKS))
def exported(request, mjlab, tmp_path_factory):
    """(task, the exported ONNX policy of a run of it)."""
    from embodied_ppo.app import api
    from embodied_ppo.app.export import export_policy
    from embodied_ppo.config.building import from_dict

    task = TASKS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    run = api.train(from_dict(config(task)), run_dir=tmp / "run")
    path, _, meta = export_policy(run.checkpoint, "onnx", tmp / "policy.onnx")
    assert (tmp / "policy.onnx.mjb").is_file() and meta["mjlab"]["task"] == task
    return task, path


def mjlab_env(task: str):
    """Two envs of the task as mjlab steps them, without training's observation noise and
    encoder bias (they stand for sensors, which the loop reads exactly)."""
    from embodied_ppo.config.building import from_dict
    from embodied_ppo.vecenv.mjlab_tasks import build, quietly, task_config

    cfg = task_config(from_dict(config(task)).env, 2, 3)
    cfg.observations["actor"].enable_corruption = False
    cfg.events.pop("encoder_bias", None)
    env = build(cfg, torch.device("cpu"))
    quietly(env.reset, seed=3)
    return env


def test_the_loops_observation_and_control_equal_mjlabs(exported, loop_module):
    import mujoco

    task, policy = exported
    loop = loop_module.Loop(policy)
    env = mjlab_env(task)
    manager = env.observation_manager
    names, dims = manager.active_terms["actor"], manager.group_obs_term_dim["actor"]
    robot = env.scene["robot"]
    gen = torch.Generator().manual_seed(0)
    n_actions = loop.actuation.size
    for step in range(12):  # the robots moving: velocities, tilt, a changing last action
        action = torch.randn(2, n_actions, generator=gen) * 0.5
        obs = env.step(action)[0]["actor"][0].double().numpy()
        # The applied control of this step's action: mjlab's actuators' controls of env 0.
        ctrl = loop.actuation.control(action[0].double().numpy(), np.zeros(loop.model.nu))
        np.testing.assert_allclose(ctrl, env.sim.data.ctrl[0].double().numpy(), rtol=0, atol=1e-6)
        # The same MuJoCo state in the loop's model: its observation, term by term.
        loop.data.qpos[:] = env.sim.data.qpos[0].double().numpy()
        loop.data.qvel[:] = env.sim.data.qvel[0].double().numpy()
        mujoco.mj_forward(loop.model, loop.data)
        last = env.action_manager.action[0].double().numpy()
        command = env.command_manager.get_command("twist")[0].double().numpy()
        terms = loop.observer.terms(loop.data, last, command)["actor"]
        assert list(terms) == list(names)
        start = 0
        for name, dim in zip(names, dims, strict=True):
            ours, theirs = terms[name], obs[start : start + dim[0]]
            np.testing.assert_allclose(
                ours, theirs, rtol=1e-5, atol=2e-5, err_msg=f"{task} {name} step {step}"
            )
            start += dim[0]
        # The tracking error's velocities are mjlab's root-link ones.
        velocity = loop_module.body_velocity(loop.model, loop.data, loop.observer.root)
        np.testing.assert_allclose(
            velocity[:3], robot.data.root_link_lin_vel_b[0].double().numpy(), atol=2e-5
        )
        np.testing.assert_allclose(
            velocity[3:], robot.data.root_link_ang_vel_b[0].double().numpy(), atol=2e-5
        )
    assert abs(command).sum() > 0 and abs(obs).max() > 0.1
    env.close()


def test_the_loop_reports_tracking_and_falls(exported, capsys, loop_module):
    task, policy = exported
    loop_module.main([str(policy), "--seconds", "1", "--schedule", "0,0.5,0,0", "0.5,0,0,0.3"])
    out = capsys.readouterr().out
    assert (
        f"{task} in MuJoCo" in out
        and "50 policy steps" in out
        and "at 50 Hz, physics 200 Hz" in out
    )
    assert "tracking error: xy " in out and "falls: " in out
    assert "command vx +0.50 vy +0.00 yaw +0.00 from 0 s: achieved vx " in out


def _script(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _one_line(done: subprocess.CompletedProcess, fragment: str) -> None:
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mjlab_velocity: error: ") and fragment in line, line


def test_bad_input_is_one_line(exported, tmp_path):
    task, policy = exported
    run = policy.parent / "run"
    _one_line(_script(run), "is a run directory: export its policy first")
    _one_line(_script(tmp_path), "is neither an exported policy (.onnx) nor a run directory")
    # An export of a task of another kind (no mjlab block), and one whose policy reads a term
    # the loop does not compute (a rough task's height scan).
    other = tmp_path / "other.onnx"
    other.write_bytes(policy.read_bytes())
    meta = json.loads(policy.with_name(policy.name + ".json").read_text())
    plain = {k: v for k, v in meta.items() if k != "mjlab"}
    other.with_name("other.onnx.json").write_text(json.dumps(plain))
    _one_line(_script(other), "has no mjlab block")
    meta["mjlab"]["observation"]["actor"]["terms"][0]["function"] = "height_scan"
    other.with_name("other.onnx.json").write_text(json.dumps(meta))
    _one_line(
        _script(other),
        "reads observation term 'base_lin_vel' (height_scan), which this loop does not compute",
    )


# One robot: the task's id is refused before anything of the robot is read.
@pytest.mark.parametrize("exported", ["go1"], indirect=True)
def test_an_export_of_a_task_mjlab_lacks_is_one_line(exported, tmp_path):
    import shutil

    _, policy = exported
    run = tmp_path / "run"
    shutil.copytree(policy.parent / "run", run)
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(
        text.replace("Unitree-G1", "Unitree-H9").replace("Unitree-Go1", "Unitree-H9")
    )
    from embodied_ppo.io.checkpoint import load_checkpoint, write_checkpoint

    state = load_checkpoint(run)
    state["config"]["env"]["id"] = state["config"]["env"]["id"].rsplit("-", 1)[0] + "-H9"
    write_checkpoint(run / "checkpoints" / "latest.pt", state)
    done = subprocess.run(
        [sys.executable, "-m", "embodied_ppo", "export", str(run), "--format", "onnx",
         "--out", str(tmp_path / "p.onnx")], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.strip().splitlines() if not x.startswith("Warp")]
    assert line.startswith("embodied-ppo: error: env.id: unknown mjlab task") and "-H9" in line
    assert not (tmp_path / "p.onnx").exists()
