"""scripts/bench/recurrent.py and its report: the memory tasks' contenders, their statistics and
curves, runs saved by invocations side by side, the policy a run keeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench_support import run_module

from scripts.bench import recurrent
from scripts.bench.report import memory


def test_bench_recurrent_reports_each_set_of_seeds_with_its_statistics():
    def run(value: float) -> dict:
        return {"mean": value, "wall_s": 50.0, "returns": [value]}

    record = {
        "task": "cartpole",
        "steps": 100_000,
        "episodes": 20,
        "results": {
            "ours": {
                "0": run(500.0),
                "100": run(296.0),
                "101": run(498.0),
                "102": run(500.0),
                "103": run(317.0),
            }
        },
    }
    lines = memory.summary_lines(record)
    evaluation = next(x for x in lines if "evaluation 100-103" in x)
    # Sorted 296 317 498 500: the IQM is the mean of 317 and 498; target 475.
    assert "| 407.5 [" in evaluation and "| 296.0 (seed 100) | 2 of 4 (101, 102) |" in evaluation
    assert any("tuning 0 | 500.0 [500.0, 500.0]" in x for x in lines)


def test_bench_recurrent_keeps_the_runs_another_invocation_saved(tmp_path):
    """ours and sb3 side by side in two invocations with one --out: neither drops the other's."""
    out = tmp_path / "pendulum.json"
    mine = {"task": "pendulum", "steps": 100, "episodes": 20, "results": {}}
    theirs = json.loads(json.dumps(mine))
    mine = recurrent.save_run(out, mine, "ours", 100, {"mean": -200.0})
    theirs = recurrent.save_run(out, theirs, "sb3", 100, {"mean": -210.0})
    mine = recurrent.save_run(out, mine, "ours", 101, {"mean": -220.0})
    written = json.loads(out.read_text())
    assert written == mine and written["results"] == {
        "ours": {"100": {"mean": -200.0}, "101": {"mean": -220.0}},
        "sb3": {"100": {"mean": -210.0}},
    }
    assert [p.name for p in tmp_path.iterdir()] == ["pendulum.json"]


def test_bench_recurrent_draws_the_iqm_band_of_each_of_our_contenders(tmp_path, monkeypatch):
    """One image per set of seeds; a band per contender with a curve on at least two seeds
    (sb3 keeps no curve, one seed gives no band), each the IQM over those seeds."""

    def run(level):
        return {"mean": level, "wall_s": 1.0, "curve": [[0, 0.0], [100, level]]}

    record = {"task": "cartpole", "results": {
        "ours": {"100": run(400.0), "101": run(500.0), "102": run(450.0), "1": run(300.0)},
        "ours_best": {"100": run(480.0), "101": run(490.0)},
        "memoryless": {"1": run(40.0), "2": run(50.0)},
        "sb3": {"100": {"mean": 300.0, "wall_s": 9.0}, "101": {"mean": 200.0, "wall_s": 9.0}},
    }}  # fmt: skip
    drawn = {}
    monkeypatch.setattr(memory, "plot_bands",
                        lambda bands, out, title, ylabel: drawn.setdefault(out.name, bands))  # fmt: skip
    written = memory.plot(record, tmp_path)
    assert [p.name for p in written] == ["recurrent_cartpole_evaluation_iqm.png",
                                         "recurrent_cartpole_tuning_iqm.png"]  # fmt: skip
    evaluation = drawn["recurrent_cartpole_evaluation_iqm.png"]
    assert list(evaluation) == ["ours, seeds 100-102", "ours_best, seeds 100, 101"]
    assert evaluation["ours, seeds 100-102"].iqm[-1] == pytest.approx(450.0)
    assert list(drawn["recurrent_cartpole_tuning_iqm.png"]) == ["memoryless, seeds 1, 2"]


def fake_our_runs(recurrent, monkeypatch, keep_best=True) -> list[list[str]]:
    """Replace the benchmark's subprocesses: `train` makes the run folder (with a
    checkpoints/best.pt when it evaluates periodically and `keep_best`), `eval` of a run
    folder (the final policy) scores 1.0, of checkpoints/best.pt 2.0 (at step 96); the commands
    run are returned."""
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        if "train" in cmd:
            run = Path(next(a for a in cmd if a.startswith("trainer.run_dir=")).split("=", 1)[1])
            run.mkdir(parents=True)
            (run / "metrics.jsonl").write_text(
                json.dumps({"global_step": 64, "charts/episodic_return": 9.0}) + "\n"
            )
            if keep_best and "trainer.eval_interval=null" not in cmd:
                (run / "checkpoints").mkdir()
                (run / "checkpoints" / "best.pt").write_bytes(b"")
        else:
            best = cmd[cmd.index("eval") + 1].endswith("best.pt")
            summary = {"returns": [2.0 if best else 1.0], "mean_return": 2.0 if best else 1.0,
                       "global_step": 96 if best else 128}  # fmt: skip
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(summary))

    monkeypatch.setattr(recurrent.subprocess, "run", fake_run)
    return commands


def test_bench_recurrent_gives_our_runs_the_run_settings_and_records_them(tmp_path, monkeypatch):
    commands = fake_our_runs(recurrent, monkeypatch)
    settings = recurrent.run_settings(["trainer.torch_threads=1", "env.threads=1"])
    task = recurrent.TASKS["pendulum"]
    record = recurrent.run_ours(task, 100, 256, 2, "ours", tmp_path, settings)
    train = commands[0]
    assert train[-3:] == [f"trainer.run_dir={tmp_path / 'ours_100'}", *settings]
    assert record["settings"] == settings and record["mean"] == 1.0
    assert record["curve"] == [[64, 9.0]]
    # Without settings a run is the config's alone, and the record says nothing of them.
    commands.clear()
    plain = recurrent.run_ours(task, 101, 256, 2, "memoryless", tmp_path)
    assert commands[0][-1] == f"trainer.run_dir={tmp_path / 'memoryless_101'}"
    assert "model.recurrent=null" in commands[0] and "settings" not in plain


def test_bench_recurrent_ours_best_is_scored_by_the_policy_the_run_keeps(tmp_path, monkeypatch):
    """ours trains without periodic evaluation; ours_best with the config's own, and is scored
    by checkpoints/best.pt on the same test episodes, its final policy kept beside."""
    commands = fake_our_runs(recurrent, monkeypatch)
    task = recurrent.TASKS["cartpole"]
    ours = recurrent.run_ours(task, 100, 256, 20, "ours", tmp_path)
    assert "trainer.eval_interval=null" in commands[0] and ours["mean"] == 1.0
    commands.clear()
    best = recurrent.run_ours(task, 100, 256, 20, "ours_best", tmp_path)
    train, final, kept = commands
    assert not any(a.startswith("trainer.eval_interval") for a in train)
    assert final[final.index("eval") + 1] == str(tmp_path / "ours_best_100")
    assert kept[kept.index("eval") + 1] == str(tmp_path / "ours_best_100/checkpoints/best.pt")
    for cmd in (final, kept):  # the same test episodes
        assert cmd[cmd.index("--seed") + 1] == "10000" and cmd[cmd.index("--episodes") + 1] == "20"
    assert (best["mean"], best["returns"], best["best_step"]) == (2.0, [2.0], 96)
    assert (best["final_mean"], best["final_returns"]) == (1.0, [1.0])


def test_bench_recurrent_ours_best_without_a_kept_policy_is_one_line(tmp_path, monkeypatch):
    """A run too short for its first periodic evaluation keeps no best.pt: one line, no
    traceback; a config without periodic evaluation is refused before anything trains."""
    commands = fake_our_runs(recurrent, monkeypatch, keep_best=False)
    with pytest.raises(SystemExit, match="kept no checkpoints/best.pt: its 256 steps ended"):
        recurrent.run_ours(recurrent.TASKS["cartpole"], 100, 256, 20, "ours_best", tmp_path)
    assert len(commands) == 2  # trained and scored its final policy, then stopped
    tasks = {"cartpole": dict(recurrent.TASKS["cartpole"], config="configs/cartpole.yaml")}
    monkeypatch.setattr(recurrent, "TASKS", tasks)
    monkeypatch.setattr(sys, "argv", ["recurrent.py", "--task", "cartpole",
                                      "--contenders", "ours_best"])  # fmt: skip
    commands.clear()
    with pytest.raises(SystemExit) as exit_:
        recurrent.main()
    assert exit_.value.code == 2 and commands == []


def test_bench_recurrent_refuses_a_setting_that_changes_what_a_run_learns(tmp_path):
    out = tmp_path / "recurrent.json"
    ran = run_module("scripts.bench.recurrent", "--task", "pendulum", "--out", str(out),
                     "--set", "optim.lr=0.1")  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert ran.stderr.startswith("scripts.bench.recurrent: error: --set optim.lr=0.1: expected")
    assert not out.exists()
