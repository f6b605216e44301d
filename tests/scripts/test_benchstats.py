"""scripts/benchstats.py: the IQM, its bootstrap interval, median, worst seed, seeds at target."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import benchstats
import numpy as np
import pytest


def test_the_iqm_of_4_runs_is_the_mean_of_the_middle_two():
    assert benchstats.iqm([10.0, 0.0, 4.0, 2.0]) == pytest.approx(3.0)  # sorted 0 2 4 10


def test_the_iqm_of_5_runs_weighs_the_runs_across_the_quartiles_by_their_share_inside():
    # Each run holds 0.2 of the mass; [0.25, 0.75] takes 0.15 of the 2nd and 4th, all of the 3rd:
    # (0.75 * 2 + 4 + 0.75 * 8) / 2.5.
    assert benchstats.iqm([8.0, 100.0, 1.0, 4.0, 2.0]) == pytest.approx(4.6)
    weights = benchstats.iqm_weights(5)
    assert weights == pytest.approx([0.0, 0.3, 0.4, 0.3, 0.0])


def test_the_iqm_of_10_runs_takes_half_of_the_3rd_and_8th():
    squares = [float(k * k) for k in range(10, 0, -1)]  # 100, 81, ..., 1
    # (0.5 * 9 + 16 + 25 + 36 + 49 + 0.5 * 64) / 5
    assert benchstats.iqm(squares) == pytest.approx(32.5)


def test_the_iqm_of_3_runs_and_of_one():
    assert benchstats.iqm([30.0, 0.0, 3.0]) == pytest.approx((0.25 * 0 + 3 + 0.25 * 30) / 1.5)
    assert benchstats.iqm([7.0]) == 7.0


@pytest.mark.parametrize("n", range(1, 13))
def test_the_weights_are_a_mean_over_half_the_mass(n):
    weights = benchstats.iqm_weights(n)
    assert weights.sum() == pytest.approx(1.0) and (weights >= 0).all()
    assert weights == pytest.approx(weights[::-1])  # symmetric: no side is favoured
    assert weights.max() <= min(1.0, 2.0 / n) + 1e-12  # a run: at most its share over 1/2


def test_ties_and_outliers():
    assert benchstats.iqm([5.0] * 5) == pytest.approx(5.0)
    assert benchstats.iqm([0.0, 1.0, 0.0, 1.0]) == pytest.approx(0.5)
    # The best and the worst of 5 or more runs do not count at all.
    runs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert benchstats.iqm([-1e9, *runs[1:4], 1e9]) == benchstats.iqm(runs)


def test_no_runs_is_an_error():
    with pytest.raises(ValueError):
        benchstats.iqm([])
    with pytest.raises(ValueError):
        benchstats.summarize({})


def test_the_interval_of_two_runs_is_their_range():
    # Resamples of [0, 1]: (0, 0), (0, 1), (1, 0), (1, 1), IQMs 0, 0.5, 0.5, 1, each of
    # probability 1/4: the 2.5th and 97.5th percentiles are 0 and 1. Drawn without
    # replacement every resample would be 0.5.
    assert benchstats.iqm_interval([0.0, 1.0]) == (0.0, 1.0)


def test_the_interval_is_reproducible_and_holds_the_iqm():
    runs = [120.0, 480.0, 500.0, 500.0, 310.0, 495.0, 500.0, 470.0, 45.0, 500.0]
    low, high = benchstats.iqm_interval(runs)
    assert benchstats.iqm_interval(runs) == (low, high)  # the same seed, the same report
    assert low <= benchstats.iqm(runs) <= high and low < high
    assert min(runs) <= low and high <= max(runs)
    other = benchstats.iqm_interval(runs, seed=1)
    assert other != (low, high) and other == pytest.approx((low, high), rel=0.05)


def test_the_interval_matches_the_exact_bootstrap_distribution():
    # Every one of the 5^5 resamples of 5 runs, with its probability: the exact percentiles.
    runs = [0.0, 1.0, 3.0, 7.0, 20.0]
    iqms = np.sort([benchstats.iqm(r) for r in itertools.product(runs, repeat=5)])
    exact = np.quantile(iqms, [0.025, 0.975])
    low, high = benchstats.iqm_interval(runs, resamples=20_000)
    assert low == pytest.approx(exact[0], abs=0.15) and high == pytest.approx(exact[1], abs=0.3)


def test_one_run_and_tied_runs_have_a_point_interval():
    assert benchstats.iqm_interval([7.0]) == (7.0, 7.0)
    assert benchstats.iqm_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_the_summary_names_the_worst_seed_and_the_seeds_at_target():
    s = benchstats.summarize({100: 500.0, 101: 296.0, 102: 498.0, 103: 475.0}, target=475.0)
    assert s.n == 4 and s.seeds == ("100", "101", "102", "103")
    assert s.iqm == pytest.approx((475.0 + 498.0) / 2)
    assert s.median == pytest.approx(486.5)
    assert (s.worst, s.worst_seed) == (296.0, "101")
    assert s.at_target == ("100", "102", "103") and s.fraction_at_target == 0.75
    cells = benchstats.cells(s)
    assert cells["at_target"] == "3 of 4 (100, 102, 103)"
    assert cells["worst"] == "296 (seed 101)" and cells["seeds"] == "100-103"
    assert cells["iqm"].startswith("486 [") and cells["median"] == "486"
    none = benchstats.summarize({1: 1.0})
    assert none.fraction_at_target is None and benchstats.cells(none)["at_target"] == "-"
    assert benchstats.cells(benchstats.summarize({1: 0.0}, target=1.0))["at_target"] == "0 of 1"


def test_seed_lists_are_written_short():
    assert benchstats.seeds_text(["1", "2", "3"]) == "1-3"
    assert benchstats.seeds_text(["100", "101"]) == "100, 101"
    assert benchstats.seeds_text(["0", "2", "5"]) == "0, 2, 5"
    assert benchstats.seeds_text([]) == "-"


def test_a_curve_band_reads_every_seed_at_the_same_steps():
    # Seed "a" logged every 10 steps, seed "b" every 20, seed "c" from step 10 only.
    curves = {
        "a": ([0, 10, 20, 30, 40], [0.0, 1.0, 2.0, 3.0, 4.0]),
        "b": ([0, 20, 40], [0.0, 4.0, 8.0]),
        "c": ([10, 40], [10.0, 10.0]),
    }
    band = benchstats.curve_band(curves, points=4)
    assert band.steps == pytest.approx([10, 20, 30, 40])  # the range every seed covers
    for k, step in enumerate(band.steps):
        at = [step / 10, step / 5, 10.0]  # each seed's value there
        assert band.iqm[k] == pytest.approx(benchstats.iqm(at))
        assert band.low[k] <= band.iqm[k] <= band.high[k]
        assert min(at) <= band.low[k] and band.high[k] <= max(at)
    assert band.seeds == ("a", "b", "c")
    same = benchstats.curve_band({1: ([0, 1], [2.0, 3.0]), 2: ([0, 1], [2.0, 3.0])}, points=3)
    assert same.low == pytest.approx(same.high) and same.iqm == pytest.approx([2.0, 2.5, 3.0])
    with pytest.raises(ValueError):
        benchstats.curve_band({1: ([0, 1], [0.0, 0.0]), 2: ([5, 6], [0.0, 0.0])})


def test_against_rliable():
    """rliable (the `bench` extra) trims whole runs; for a multiple of 4 runs its IQM is ours,
    and its percentile interval (20,000 resamples by its own generator) agrees within the
    resampling noise."""
    pytest.importorskip("rliable")
    from rliable import library, metrics

    rng = np.random.default_rng(3)
    for n in (4, 8):
        runs = rng.normal(1000.0, 300.0, size=n)
        assert metrics.aggregate_iqm(runs[:, None]) == pytest.approx(benchstats.iqm(runs))
        _, intervals = library.get_interval_estimates(
            {"x": runs[:, None]}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=20_000
        )
        low, high = benchstats.iqm_interval(runs, resamples=20_000)
        spread = runs.max() - runs.min()
        assert intervals["x"][0, 0] == pytest.approx(low, abs=0.02 * spread)
        assert intervals["x"][1, 0] == pytest.approx(high, abs=0.02 * spread)
    # 5 runs: rliable averages the middle 3 whole runs; ours weighs the 2nd and 4th by 3/4.
    runs = np.array([1.0, 2.0, 4.0, 8.0, 100.0])
    assert metrics.aggregate_iqm(runs[:, None]) == pytest.approx((2 + 4 + 8) / 3)
    assert benchstats.iqm(runs) == pytest.approx(4.6)


def test_bench_recurrent_reports_each_set_of_seeds_with_its_statistics():
    import bench_recurrent

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
    lines = bench_recurrent.summary_lines(record)
    evaluation = next(x for x in lines if "evaluation 100-103" in x)
    # Sorted 296 317 498 500: the IQM is the mean of 317 and 498; target 475.
    assert "| 407.5 [" in evaluation and "| 296.0 (seed 100) | 2 of 4 (101, 102) |" in evaluation
    assert any("tuning 0 | 500.0 [500.0, 500.0]" in x for x in lines)


def test_bench_arm_reports_success_rates_per_set_of_seeds(tmp_path):
    import bench_arm

    def run(rate: float) -> dict:
        return {"success_rate": rate, "wall_s": 60.0, "curve": [[0, 0.0], [100, rate * 100]]}

    rates = (0.99, 0.6, 0.8, 0.75, 0.72)
    results = {"push": {str(s): run(r) for s, r in zip(range(100, 105), rates)}}
    results["push"]["3"] = run(0.55)
    lines = bench_arm.summary_lines(results)
    evaluation = next(x for x in lines if "evaluation 100-104" in x)
    # Sorted 0.6 0.72 0.75 0.8 0.99: (0.75 * 0.72 + 0.75 + 0.75 * 0.8) / 2.5; target 0.7.
    assert f"| {(0.75 * 0.72 + 0.75 + 0.75 * 0.8) / 2.5:.2f} [" in evaluation
    assert "| 0.60 (seed 101) | 4 of 5 (100, 102, 103, 104) |" in evaluation
    assert any("tuning 3 | 0.55 [0.55, 0.55]" in x and "0 of 1" in x for x in lines)
    bench_arm.plot(results, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["arm_push_evaluation_iqm.png"]  # one seed: none


def test_bench_arm_holds_each_task_to_its_requirement_on_evaluation_seeds(tmp_path):
    """reach needs 5 of 5 seeds at 95%, push 4 of 5 at 70%: met, missed, or open while the
    seeds yet to run could still make it; tasks without evaluation seeds are named."""
    import bench_arm

    def runs(*rates, first=100):
        return {str(first + i): {"success_rate": r, "wall_s": 60.0} for i, r in enumerate(rates)}

    def row(results, task):
        lines = bench_arm.report_lines(results, tmp_path)
        return next(x for x in lines if x.startswith(f"| `configs/{task}.yaml` | evaluation"))

    assert "| 5 of 5: met |" in row({"reach": runs(0.96, 0.95, 1.0, 0.99, 0.97)}, "reach")
    assert "| 5 of 5: **missed** |" in row({"reach": runs(0.96, 0.91)}, "reach")
    assert "| 4 of 5: open (2 seeds to run) |" in row({"push": runs(0.8, 0.5, 0.9)}, "push")
    assert "| 4 of 5: met |" in row({"push": runs(0.8, 0.7, 0.9, 0.75)}, "push")
    assert "| 4 of 5: open (1 seed to run) |" in row({"push": runs(0.8, 0.5, 0.9, 0.75)}, "push")
    assert "| 4 of 5: **missed** |" in row({"push": runs(0.8, 0.5, 0.6, 0.75)}, "push")
    lines = bench_arm.report_lines({"push": runs(0.8, 0.9) | runs(0.6, first=3)}, tmp_path)
    tuning = next(x for x in lines if "| tuning 3 |" in x)
    assert "| >= 0.70: 0 of 1 | - |" in tuning  # no requirement on tuning seeds
    assert any(x.startswith("Not yet measured on evaluation seeds: `configs/reach.yaml`, "
                            "`configs/reach_pixels.yaml`") for x in lines)  # fmt: skip
    assert bench_arm.report_lines({}, tmp_path) == []


def test_bench_arm_keeps_the_seeds_another_invocation_saved(tmp_path):
    """Two invocations side by side (say push 100-102 and push 103-104, or reach and push)
    each save their finished seeds into the same results file: neither drops the other's."""
    import bench_arm

    results = tmp_path / "arm.json"
    bench_arm.save_seed(results, "push", 100, {"success_rate": 0.8})
    bench_arm.save_seed(results, "push", 103, {"success_rate": 0.7})  # the other invocation
    written = bench_arm.save_seed(results, "reach", 100, {"success_rate": 0.96})
    expected = {"push": {"100": {"success_rate": 0.8}, "103": {"success_rate": 0.7}},
                "reach": {"100": {"success_rate": 0.96}}}  # fmt: skip
    assert written == expected and json.loads(results.read_text()) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["arm.json"]


def test_bench_recurrent_keeps_the_runs_another_invocation_saved(tmp_path):
    """ours and sb3 side by side in two invocations with one --out: neither drops the other's."""
    import bench_recurrent

    out = tmp_path / "pendulum.json"
    mine = {"task": "pendulum", "steps": 100, "episodes": 20, "results": {}}
    theirs = json.loads(json.dumps(mine))
    mine = bench_recurrent.save_run(out, mine, "ours", 100, {"mean": -200.0})
    theirs = bench_recurrent.save_run(out, theirs, "sb3", 100, {"mean": -210.0})
    mine = bench_recurrent.save_run(out, mine, "ours", 101, {"mean": -220.0})
    written = json.loads(out.read_text())
    assert written == mine and written["results"] == {
        "ours": {"100": {"mean": -200.0}, "101": {"mean": -220.0}},
        "sb3": {"100": {"mean": -210.0}},
    }
    assert [p.name for p in tmp_path.iterdir()] == ["pendulum.json"]


def test_bench_recurrent_draws_the_iqm_band_of_each_of_our_contenders(tmp_path, monkeypatch):
    """One image per set of seeds; a band per contender with a curve on at least two seeds
    (sb3 keeps no curve, one seed gives no band), each the IQM over those seeds."""
    import bench_recurrent

    def run(level):
        return {"mean": level, "wall_s": 1.0, "curve": [[0, 0.0], [100, level]]}

    record = {"task": "cartpole", "results": {
        "ours": {"100": run(400.0), "101": run(500.0), "102": run(450.0), "1": run(300.0)},
        "ours_best": {"100": run(480.0), "101": run(490.0)},
        "memoryless": {"1": run(40.0), "2": run(50.0)},
        "sb3": {"100": {"mean": 300.0, "wall_s": 9.0}, "101": {"mean": 200.0, "wall_s": 9.0}},
    }}  # fmt: skip
    drawn = {}
    monkeypatch.setattr(bench_recurrent.benchstats, "plot_bands",
                        lambda bands, out, title, ylabel: drawn.setdefault(out.name, bands))  # fmt: skip
    written = bench_recurrent.plot(record, tmp_path)
    assert [p.name for p in written] == ["recurrent_cartpole_evaluation_iqm.png",
                                         "recurrent_cartpole_tuning_iqm.png"]  # fmt: skip
    evaluation = drawn["recurrent_cartpole_evaluation_iqm.png"]
    assert list(evaluation) == ["ours, seeds 100-102", "ours_best, seeds 100, 101"]
    assert evaluation["ours, seeds 100-102"].iqm[-1] == pytest.approx(450.0)
    assert list(drawn["recurrent_cartpole_tuning_iqm.png"]) == ["memoryless, seeds 1, 2"]


def fake_our_runs(bench_recurrent, monkeypatch, keep_best=True) -> list[list[str]]:
    """Replace bench_recurrent's subprocesses: `train` makes the run folder (with a
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

    monkeypatch.setattr(bench_recurrent.subprocess, "run", fake_run)
    return commands


def test_bench_recurrent_gives_our_runs_the_run_settings_and_records_them(tmp_path, monkeypatch):
    import bench_recurrent

    commands = fake_our_runs(bench_recurrent, monkeypatch)
    settings = bench_recurrent.run_settings(["trainer.torch_threads=1", "env.threads=1"])
    task = bench_recurrent.TASKS["pendulum"]
    record = bench_recurrent.run_ours(task, 100, 256, 2, "ours", tmp_path, settings)
    train = commands[0]
    assert train[-3:] == [f"trainer.run_dir={tmp_path / 'ours_100'}", *settings]
    assert record["settings"] == settings and record["mean"] == 1.0
    assert record["curve"] == [[64, 9.0]]
    # Without settings a run is the config's alone, and the record says nothing of them.
    commands.clear()
    plain = bench_recurrent.run_ours(task, 101, 256, 2, "memoryless", tmp_path)
    assert commands[0][-1] == f"trainer.run_dir={tmp_path / 'memoryless_101'}"
    assert "model.recurrent=null" in commands[0] and "settings" not in plain


def test_bench_recurrent_ours_best_is_scored_by_the_policy_the_run_keeps(tmp_path, monkeypatch):
    """ours trains without periodic evaluation; ours_best with the config's own, and is scored
    by checkpoints/best.pt on the same test episodes, its final policy kept beside."""
    import bench_recurrent

    commands = fake_our_runs(bench_recurrent, monkeypatch)
    task = bench_recurrent.TASKS["cartpole"]
    ours = bench_recurrent.run_ours(task, 100, 256, 20, "ours", tmp_path)
    assert "trainer.eval_interval=null" in commands[0] and ours["mean"] == 1.0
    commands.clear()
    best = bench_recurrent.run_ours(task, 100, 256, 20, "ours_best", tmp_path)
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
    import bench_recurrent

    commands = fake_our_runs(bench_recurrent, monkeypatch, keep_best=False)
    with pytest.raises(SystemExit, match="kept no checkpoints/best.pt: its 256 steps ended"):
        bench_recurrent.run_ours(bench_recurrent.TASKS["cartpole"], 100, 256, 20, "ours_best",
                                 tmp_path)  # fmt: skip
    assert len(commands) == 2  # trained and scored its final policy, then stopped
    tasks = {"cartpole": dict(bench_recurrent.TASKS["cartpole"], config="configs/cartpole.yaml")}
    monkeypatch.setattr(bench_recurrent, "TASKS", tasks)
    monkeypatch.setattr(sys, "argv", ["bench_recurrent.py", "--task", "cartpole",
                                      "--contenders", "ours_best"])  # fmt: skip
    commands.clear()
    with pytest.raises(SystemExit) as exit_:
        bench_recurrent.main()
    assert exit_.value.code == 2 and commands == []


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"task": "cartpole"}'])
@pytest.mark.parametrize(
    "args",
    [
        ["bench_recurrent.py", "--task", "cartpole", "--out"],
        ["bench_recurrent.py", "--summarize"],
        ["bench_arm.py", "--tasks", "reach", "--root", "{tmp}", "--results"],
        ["benchmark_mujoco.py", "--report-only", "--results"],
    ],
)
def test_a_results_file_the_script_did_not_write_is_refused_in_one_line(tmp_path, args, text):
    """Nothing trains, no traceback, the file is left as it was."""
    out = tmp_path / "other.json"
    out.write_text(text)
    script, *rest = (a.replace("{tmp}", str(tmp_path / "runs")) for a in args)
    proc = subprocess.run(
        [sys.executable, str(Path(benchstats.__file__).with_name(script)), *rest, str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "is not a results file of this script" in proc.stderr.strip().splitlines()[-1]
    assert out.read_text() == text  # nothing lost


def test_bench_recurrent_refuses_a_setting_that_changes_what_a_run_learns(tmp_path):
    out = tmp_path / "recurrent.json"
    proc = subprocess.run(
        [sys.executable, str(Path(benchstats.__file__).with_name("bench_recurrent.py")), "--task", "pendulum",
         "--out", str(out), "--set", "optim.lr=0.1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("bench_recurrent.py: error: --set optim.lr=0.1: expected")
    assert not out.exists()
