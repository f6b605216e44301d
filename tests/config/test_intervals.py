"""Intervals in either unit: trainer.X_interval counts iterations, trainer.X_interval_steps env
steps; exactly one is in force; a run logs, checkpoints, evaluates and films where its cadence
says, and a run saved before the env-step keys existed loads and resumes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from conftest import tiny_config
from support import ROOT

import embodied_ppo
from embodied_ppo.config.building import from_dict
from embodied_ppo.config.loading import load_config
from embodied_ppo.core.errors import ConfigError

BATCH = 32  # steps of one iteration of tiny_config: 2 envs x 16


def quiet() -> dict:
    return {"progress": io.StringIO()}


def test_the_steps_key_given_alone_turns_its_iteration_twin_off():
    env = {"id": "CartPole-v1"}
    t = from_dict({"env": env, "trainer": {"checkpoint_interval_steps": 5000}}).trainer
    assert (t.checkpoint_interval, t.checkpoint_interval_steps) == (None, 5000)
    t = from_dict({"env": env}).trainer
    assert (t.checkpoint_interval, t.checkpoint_interval_steps) == (10, None)
    assert (t.log_interval, t.eval_interval, t.eval_interval_steps) == (1, None, None)
    # On the command line an override in one unit replaces the file's other one.
    cfg = load_config(ROOT / "configs/cartpole.yaml", ["trainer.checkpoint_interval_steps=20000"])
    assert yaml.safe_load((ROOT / "configs/cartpole.yaml").read_text())["trainer"][
        "checkpoint_interval"
    ]  # the file gives it in iterations
    assert (cfg.trainer.checkpoint_interval, cfg.trainer.checkpoint_interval_steps) == (None, 20000)
    cfg = load_config(ROOT / "configs/cartpole_pomdp.yaml", ["trainer.eval_interval_steps=4096"])
    assert (cfg.trainer.eval_interval, cfg.trainer.eval_interval_steps) == (None, 4096)


@pytest.mark.parametrize(
    ("trainer", "fragment"),
    [
        (
            {"eval_interval": 5, "eval_interval_steps": 1000},
            "trainer.eval_interval: got 5 (iterations) and trainer.eval_interval_steps 1000 "
            "(env steps); give one of them",
        ),
        (
            {"checkpoint_interval": None},
            "trainer.checkpoint_interval: null, and trainer.checkpoint_interval_steps is null too",
        ),
        (
            {"log_interval_steps": 0},
            "trainer.log_interval_steps: got 0, expected null or an integer >= 1 (env steps)",
        ),
        (
            {"video_interval": 2},
            "trainer.video_interval: got 2 but trainer.eval_interval is null (and ",
        ),
        ({"video_interval": 0, "eval_interval_steps": 64}, "trainer.video_interval: got 0"),
    ],
)
def test_interval_errors_are_one_line_naming_both_units(trainer, fragment):
    with pytest.raises(ConfigError) as info:
        from_dict({"env": {"id": "CartPole-v1"}, "trainer": trainer})
    assert fragment in str(info.value) and "\n" not in str(info.value)
    # Both given as overrides: refused, not one silently dropped.
    with pytest.raises(ConfigError, match="give one of them"):
        load_config(
            ROOT / "configs/cartpole.yaml",
            ["trainer.checkpoint_interval=3", "trainer.checkpoint_interval_steps=900"],
        )


def due_steps(every: int, ends: list[int]) -> list[int]:
    """The iteration ends (steps) at which something due every `every` env steps happens: the
    first end at or past each multiple."""
    out = []
    for k in range(1, ends[-1] // every + 1):
        first = next(e for e in ends if e >= k * every)
        if first not in out:
            out.append(first)
    return out


def test_a_run_logs_checkpoints_evaluates_and_films_by_env_steps(tmp_path):
    run = tmp_path / "run"
    trainer = {
        "total_steps": 12 * BATCH,
        "log_interval_steps": 50,
        "checkpoint_interval_steps": 100,
        "eval_interval_steps": 70,
        "eval_episodes": 1,
        "video_interval": 2,
    }
    cfg = tiny_config(trainer=trainer)
    assert cfg.trainer.log_interval is None and cfg.trainer.checkpoint_interval is None
    embodied_ppo.train(cfg, run_dir=run, **quiet())
    ends = [BATCH * i for i in range(1, 13)]
    last = ends[-1]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = due_steps(70, ends) + [last]
    assert [r["global_step"] for r in rows if "eval/episodic_return" in r] == sorted(set(evals))
    logged = sorted(set(due_steps(50, ends) + evals + [last]))  # an evaluation is always logged
    assert [r["global_step"] for r in rows] == logged
    saved = sorted(int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("ckpt_*.pt"))
    assert saved == sorted(set(due_steps(100, ends) + [last]))
    # Every second evaluation (a cadence of 140 steps) and the last one are filmed.
    videos = sorted(int(p.stem.removeprefix("eval-step")) for p in (run / "videos").glob("*.mp4"))
    assert videos == sorted(set(due_steps(140, ends) + [last]))


def test_a_run_saved_without_the_steps_keys_loads_and_resumes(tmp_path):
    run = tmp_path / "run"
    embodied_ppo.train(tiny_config(trainer={"total_steps": 64}), run_dir=run, **quiet())
    # config.yaml as an earlier version wrote it: no *_interval_steps, no schedule_extension.
    data = yaml.safe_load((run / "config.yaml").read_text())
    for name in ("log_interval", "checkpoint_interval", "eval_interval"):
        del data["trainer"][f"{name}_steps"]
    del data["optim"]["schedule_extension"]
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    result = embodied_ppo.train(
        resume=run, overrides=["trainer.checkpoint_interval_steps=64"], more_steps=128, **quiet()
    )
    assert result.global_step == 192
    saved = yaml.safe_load((run / "config.yaml").read_text())["trainer"]
    assert (saved["checkpoint_interval"], saved["checkpoint_interval_steps"]) == (None, 64)
    assert (Path(run) / "checkpoints" / "ckpt_128.pt").is_file()
