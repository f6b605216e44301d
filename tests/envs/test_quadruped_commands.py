"""The quadruped through the command line: a bad task argument stops `train` and `eval` in one
line naming its key, with nothing written; training and `eval` (a fixed command schedule, a
robustness sweep) report the tracking errors, the falls and every reward term."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import embodied_ppo

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "quadruped_flat.yaml"
TINY = [
    "env.num_envs=2",
    "env.max_episode_steps=16",  # episodes end within the run, so their logs are reported
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=32",
    "trainer.total_steps=64",
    "trainer.compile=false",
    "trainer.device=cpu",
    "model.hidden_sizes=[16]",
]
METRICS = ("tracking_error_lin", "tracking_error_yaw", "fall_rate")
# Terms the config weighs (a term of weight 0 is not computed, so not logged).
TERMS = ("tracking_lin_vel", "tracking_ang_vel", "torques", "action_rate", "stand_still", "pose")


def cli(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "embodied_ppo", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=300,
    )


def assert_one_line(proc: subprocess.CompletedProcess, line: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"embodied-ppo: error: {line}", proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


BAD = [
    (
        "env.kwargs.randomization.frction=[0.5,1.0]",
        "env.kwargs.randomization.frction: unknown term 'frction'; did you mean 'friction'?",
    ),
    (
        "env.kwargs.rewards.feet_air_tim=1.0",
        "env.kwargs.rewards.feet_air_tim: unknown term 'feet_air_tim'; "
        "did you mean 'feet_air_time'?",
    ),
    (
        "env.kwargs.randomization.friction=[1.25,0.4]",
        "env.kwargs.randomization.friction: got [1.25, 0.4]: low > high",
    ),
    ("env.kwargs.action_delay=-1", "env.kwargs.action_delay: got -1, expected an integer >= 0"),
    (
        "env.kwargs.commands.lin_vel_x=[-1.0,3.0]",
        "env.kwargs.commands.lin_vel_x: got [-1, 3], allowed within [-2, 2]",
    ),
]


@pytest.mark.parametrize("override, line", BAD, ids=[b[0].split("=")[0] for b in BAD])
def test_a_bad_task_argument_stops_train_in_one_line_writing_nothing(tmp_path, override, line):
    work = tmp_path / "work"
    work.mkdir()
    proc = cli("train", CONFIG, override, f"trainer.run_dir={work / 'run'}", cwd=work)
    assert_one_line(proc, line)
    assert list(work.iterdir()) == []


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("quadruped") / "run"
    embodied_ppo.train(CONFIG, TINY, run_dir=run)
    return run


def test_training_logs_tracking_errors_falls_and_each_reward_term(tiny_run):
    rows = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    logged = set().union(*rows)
    assert {f"metrics/{m}" for m in METRICS} <= logged
    assert {f"rewards/{t}" for t in TERMS} <= logged


def test_eval_runs_a_command_schedule_and_a_robustness_sweep(tiny_run):
    # Turn in place at 1.5 rad/s for 2 s: the barely trained policy stands, so the yaw-rate
    # error is about the commanded rate (random commands would give a different one).
    proc = cli(
        "eval", tiny_run, "env.max_episode_steps=100",
        "env.kwargs.command_schedule=[[0,0,0,1.5]]",
        "env.kwargs.randomization.push_interval_s=0.5",
        "--episodes", "2",
        "--sweep", "env.kwargs.randomization.friction=[[0.4,0.4],[1.25,1.25]]",
        "--sweep", "env.kwargs.randomization.added_mass=[[-1.0,-1.0],[1.0,1.0]]",
        "--sweep", "env.kwargs.randomization.push_velocity=[0.0,1.0]",
        cwd=tiny_run,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tiny_run / "eval.json").read_text())
    assert out["tracking_error_yaw"] == pytest.approx(1.5, abs=0.3)
    assert out["mean_length"] == 100
    assert "env.kwargs.command_schedule=[[0,0,0,1.5]]" in out["overrides"]
    for entry in [out, *out["sweep"]]:
        assert all(0 <= entry[m] < 10 for m in METRICS)
        assert {f"rewards/{t}" for t in TERMS} <= set(entry["log"])
    sweep = {(s["key"].rsplit(".", 1)[1], json.dumps(s["value"])): s for s in out["sweep"]}
    assert list(sweep) == [
        ("friction", "[0.4, 0.4]"), ("friction", "[1.25, 1.25]"),
        ("added_mass", "[-1.0, -1.0]"), ("added_mass", "[1.0, 1.0]"),
        ("push_velocity", "0.0"), ("push_velocity", "1.0"),
    ]  # fmt: skip
    # Each swept condition reached the robot: the same episodes went differently.
    for term, low, high in [
        ("friction", "[0.4, 0.4]", "[1.25, 1.25]"),
        ("added_mass", "[-1.0, -1.0]", "[1.0, 1.0]"),
        ("push_velocity", "0.0", "1.0"),
    ]:
        assert sweep[term, low]["log"] != sweep[term, high]["log"], term


def test_a_bad_condition_stops_eval_before_any_episode(tiny_run):
    files = lambda: {p.name: p.stat().st_mtime_ns for p in tiny_run.rglob("*")}  # noqa: E731
    before = files()
    proc = cli(
        "eval", tiny_run, "--episodes", "1",
        "--sweep", "env.kwargs.randomization.friction=[[0.4,0.4],[1.25,0.4]]",
        cwd=tiny_run,
    )  # fmt: skip
    assert_one_line(proc, "env.kwargs.randomization.friction: got [1.25, 0.4]: low > high")
    assert proc.stdout == ""  # not even the main episodes ran
    proc2 = cli("eval", tiny_run, "env.kwargs.action_delay=-1", cwd=tiny_run)
    assert_one_line(proc2, "env.kwargs.action_delay: got -1, expected an integer >= 0")
    assert files() == before
