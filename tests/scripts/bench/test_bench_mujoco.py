"""scripts/bench/mujoco.py and the page it writes: seeds, evaluation, continuing across
invocations, the report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from bench_support import run_module, write_config
from support import ROOT

import embodied_ppo
from scripts.bench import mujoco
from scripts.bench.lib import proc, tasks
from scripts.bench.lib.runs import first_reached, run_settings
from scripts.bench.report import mujoco_rows, page


def run_script(*args: str):
    return run_module("scripts.bench.mujoco", *args)


def test_seeds_are_trained_evaluated_resumed_and_reported(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    root, out = tmp_path / "bench", tmp_path / "docs" / "benchmarks.md"
    # Seed 2 was interrupted halfway by an earlier invocation: it must resume, not restart.
    stopped = embodied_ppo.train(
        config,
        ["trainer.seed=2", "trainer.total_steps=256"],
        run_dir=root / "tiny_256" / "seed2",
        callbacks=[lambda run, metrics: run.global_step >= 128],
        progress=io.StringIO(),
    )
    assert stopped.stopped and stopped.global_step == 128
    args = ["--configs", str(config), "--seeds", "1", "2", "--sb3-seeds", "--steps", "256"]
    args += ["--root", str(root), "--out", str(out)]
    ran = run_script(*args)
    assert ran.returncode == 0, ran.stderr
    # A budget other than the default 1M steps is recorded under the config's name and budget.
    results = json.loads((root / "results.json").read_text())["tiny_256"]
    assert results["env_id"] == "Pendulum-v1" and results["steps"] == 256
    assert sorted(results["ours"]) == ["1", "2"]
    # Each seed's record says which command, commit and machine measured it.
    for seed in ("1", "2"):
        prov = results["ours"][seed]["provenance"]
        assert prov["command"] == "python -m scripts.bench.mujoco " + " ".join(args)
        assert len(prov["commit"]) == 40 and prov["machine"]["cores"] >= 1
    for seed in ("1", "2"):
        run = root / "tiny_256" / f"seed{seed}"
        steps = [
            json.loads(x)["global_step"] for x in (run / "metrics.jsonl").read_text().splitlines()
        ]
        assert steps == list(range(64, 257, 64))  # seed 2: its first half kept, then resumed
        assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["seed"] == int(seed)
        ev = json.loads((run / "benchmark_eval.json").read_text())
        assert len(ev["returns"]) == 10
        assert results["ours"][seed]["eval"]["mean"] == pytest.approx(ev["mean_return"])
        # The training curve is kept with the results: the IQM band outlives the runs.
        logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        returns = [
            [r["global_step"], pytest.approx(r["charts/episodic_return"], abs=0.01)]
            for r in logged
            if "charts/episodic_return" in r
        ]
        assert returns and results["ours"][seed]["curve"] == returns
    report = out.read_text()
    assert "| `tiny_256` | 256 | tuning 1, 2 |" in report
    assert "images/benchmark_tiny_256_tuning_iqm.png" in report
    # The config's header comment is the report's account of what was tuned.
    assert "Tiny Pendulum: what was tuned and what mattered." in report
    # A second invocation trains nothing again.
    wall = {s: r["wall_s"] for s, r in results["ours"].items()}
    assert run_script(*args).returncode == 0
    again = json.loads((root / "results.json").read_text())["tiny_256"]["ours"]
    assert {s: r["wall_s"] for s, r in again.items()} == wall


def test_time_to_reach_adds_up_the_clocks_of_resumed_processes(tmp_path):
    rows = [(100, 10.0, 5.0), (200, 20.0, 50.0), (300, 4.0, 150.0), (400, 8.0, 400.0)]
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(
            json.dumps({"global_step": s, "time": t, "charts/episodic_return": r})
            for s, t, r in rows
        )
    )
    # The third row comes from a resumed process: its clock restarted at 0.
    reached = first_reached(tmp_path, (40, 100, 300, 1000))
    assert reached == {"40": [200, 20.0], "100": [300, 24.0], "300": [400, 28.0], "1000": None}


def test_the_target_column_says_met_or_missed_with_the_mean():
    assert mujoco_rows.target_status("Walker2d", 1_000_000, [4600.0, 4500.0]) == ">= 4500: met"
    assert mujoco_rows.target_status("Walker2d", 1_000_000, [4600.0, 4000.0]) == (
        ">= 4500: **missed** (4300)"
    )
    # The IQM decides, not the mean: one failed seed of five does not sink it.
    assert mujoco_rows.target_status("Walker2d", 1_000_000, [0.0] + [4600.0] * 4) == ">= 4500: met"
    assert mujoco_rows.target_status("Walker2d", 500_000, [5000.0]) == "-"  # no target for 500k
    assert mujoco_rows.target_status("Pendulum", 1_000_000, [0.0]) == "-"
    # Humanoid has a target at each budget; the timed returns include both.
    assert mujoco_rows.target_status("Humanoid", 10_000_000, [5600.0]) == ">= 5500: met"
    assert mujoco_rows.target_status("Humanoid", 1_000_000, [1200.0]) == (
        ">= 1300: **missed** (1200)"
    )
    assert tasks.thresholds("Humanoid") == (700, 1300, 5500)
    assert tasks.thresholds("Hopper") == (1000, 2000, 3300)


def test_a_budget_other_than_1m_gets_its_own_name():
    config = Path("configs/humanoid.yaml")
    assert mujoco.record_name(config, 1_000_000) == "humanoid"
    assert mujoco.record_name(config, 10_000_000) == "humanoid_10M"
    assert mujoco.record_name(config, 500_000) == "humanoid_500k"
    assert mujoco.record_name(config, 2_500_000) == "humanoid_2500k"
    assert mujoco.record_name(config, 256) == "humanoid_256"


def test_the_report_table_keeps_every_config_in_one_table(tmp_path, monkeypatch):
    plots = []

    def plot(args):  # the curves' `plot` commands
        plots.append(args)
        Path(args[args.index("--out") + 1]).write_bytes(b"png")

    monkeypatch.setattr(proc, "cli", plot)
    done = {"wall_s": 60.0, "eval": {"mean": 100.0, "std": 1.0}, "reached": {}}
    results = {
        name: {"env_id": env_id, "steps": 1000, "ours": {"1": done}, "sb3": {"1": done}}
        for name, env_id in (("a", "Hopper-v5"), ("b", "Walker2d-v5"))
    }
    for name in ("a", "b"):
        (tmp_path / name / "seed1").mkdir(parents=True)
        (tmp_path / name / "seed1" / "metrics.jsonl").write_text("")
    (tmp_path / "images").mkdir()
    out = tmp_path / "benchmarks.md"
    page.report(results, out, tmp_path)
    assert len(plots) == 2
    assert "![a, tuning seeds 1](images/benchmark_a_tuning.png)" in out.read_text()
    lines = out.read_text().splitlines()
    rows = [
        i for i, line in enumerate(lines) if line.startswith(("| `a` | 1,000", "| `b` | 1,000"))
    ]
    assert len(rows) == 2 and rows[1] == rows[0] + 1  # no line between them breaks the table
    assert (
        "| tuning 1 | 100 [100, 100] | 100 | 100 (seed 1) | - | 100 | 100 (1) |" in lines[rows[0]]
    )


def test_the_report_is_rewritten_from_the_results_file_when_the_runs_are_gone(
    tmp_path, monkeypatch
):
    plots = []
    monkeypatch.setattr(proc, "cli", plots.append)
    done = {"wall_s": 60.0, "eval": {"mean": 100.0}, "reached": {"1000": None}}
    results = {"a": {"env_id": "Hopper-v5", "steps": 1000, "ours": {"1": done}, "sb3": {}}}
    out = tmp_path / "docs" / "benchmarks.md"
    (out.parent / "images").mkdir(parents=True)
    page.report(results, out, tmp_path / "no_runs")
    # No run folder: nothing to plot, and no curve that does not exist is linked.
    assert plots == [] and "benchmark_a_tuning.png" not in out.read_text()
    image = out.parent / "images" / "benchmark_a_tuning.png"
    image.write_bytes(b"png")  # drawn by an earlier run
    page.report(results, out, tmp_path / "no_runs")
    assert plots == [] and "(images/benchmark_a_tuning.png)" in out.read_text()
    assert "| `a` | 1,000 | tuning 1 | 100 [100, 100] |" in out.read_text()
    assert "- `a`:" not in out.read_text()
    results["a"]["remarks"] = ["ran beside other work: its wall time is not comparable."]
    page.report(results, out, tmp_path / "no_runs")
    lines = out.read_text().splitlines()
    row = next(i for i, x in enumerate(lines) if x.startswith("| `a` | 1,000 | tuning 1"))
    assert lines[row + 1 : row + 3] == [
        "",  # after the table, not inside it
        "- `a`: ran beside other work: its wall time is not comparable.",
    ]


def test_evaluation_and_tuning_seeds_are_reported_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(proc, "cli", lambda args: None)

    def done(value: float) -> dict:
        curve = [[s, value * s / 3000] for s in (1000, 2000, 3000)]
        return {"wall_s": 60.0, "eval": {"mean": value}, "reached": {}, "curve": curve}

    evaluation = {str(s): done(v) for s, v in zip(range(100, 105), (900, 3700, 3650, 3500, 3800))}
    results = {
        "hopper": {"env_id": "Hopper-v5", "steps": 1_000_000, "sb3": {"100": done(1000.0)},
                   "ours": {"1": done(3600.0), "2": done(3640.0), **evaluation}},
        "ant": {"env_id": "Ant-v5", "steps": 1_000_000, "ours": {"1": done(3000.0)}, "sb3": {}},
    }  # fmt: skip
    out = tmp_path / "docs" / "benchmarks.md"
    page.report(results, out, tmp_path / "no_runs")
    text = out.read_text()
    # The IQM of 900, 3500, 3650, 3700, 3800 weighs 3500 and 3700 by 3/4; Hopper's target 3300.
    iqm = (0.75 * 3500 + 3650 + 0.75 * 3700) / 2.5
    row = next(x for x in text.splitlines() if x.startswith("| `hopper` | 1,000,000 | evaluation"))
    assert row.startswith(f"| `hopper` | 1,000,000 | evaluation 100-104 | {iqm:.0f} [")
    assert "| 3650 | 900 (seed 100) | 4 of 5 (101-104) |" in row and "| 1000 (100) |" in row
    assert "> 2609, worst >= 2087: **missed** |" in row  # the worst seed sinks this one
    assert "| `hopper` | 1,000,000 | tuning 1, 2 | 3620 [" in text
    assert "Not yet measured on evaluation seeds: `ant`." in text
    band = out.parent / "images" / "benchmark_hopper_evaluation_iqm.png"
    assert band.read_bytes()[:4] == b"\x89PNG" and f"(images/{band.name})" in text
    assert not (out.parent / "images" / "benchmark_ant_tuning_iqm.png").exists()  # one seed


def test_the_memory_tasks_table_is_computed_from_their_results_files(tmp_path, monkeypatch):
    monkeypatch.setattr(proc, "cli", lambda args: None)
    results = {"a": {"env_id": "Hopper-v5", "steps": 1000, "ours": {}, "sb3": {}}}
    out = tmp_path / "docs" / "benchmarks.md"
    out.parent.mkdir()
    page.report(results, out, tmp_path / "no_runs")
    assert "## Memory tasks" not in out.read_text()  # no results file: no section

    def record(values: list[float]) -> dict:
        ours = {str(100 + i): {"mean": v, "wall_s": 30.0} for i, v in enumerate(values)}
        return {"task": "cartpole", "steps": 100_000, "episodes": 20, "note": "beside work",
                "results": {"ours": ours, "sb3": {"0": {"mean": 300.0, "wall_s": 170.0}}}}  # fmt: skip

    bench = out.parent / "bench"
    bench.mkdir()
    (bench / "recurrent_cartpole.json").write_text(json.dumps(record([500.0] * 9 + [100.0])))
    page.report(results, out, tmp_path / "no_runs")
    lines = out.read_text().splitlines()
    row = next(x for x in lines if x.startswith("| `configs/cartpole_pomdp.yaml` | 100,000 | ours"))
    assert "| evaluation 100-109 | 500.0 [" in row and "| 100.0 (seed 109) |" in row
    assert "| >= 475: 9 of 10 (100-108) | 90% of seeds: met |" in row
    sb3 = next(x for x in lines if "| sb3 |" in x)
    assert "| tuning 0 | 300.0 [300.0, 300.0] |" in sb3 and "| - |" in sb3  # no requirement
    assert "- `recurrent_cartpole.json`: beside work" in lines
    # One seed fewer at the target misses the requirement.
    (bench / "recurrent_cartpole.json").write_text(json.dumps(record([500.0] * 8 + [100.0] * 2)))
    page.report(results, out, tmp_path / "no_runs")
    assert "| >= 475: 8 of 10 (100-107) | 90% of seeds: **missed** |" in out.read_text()
    # The policy the config keeps (best.pt) is held to the same requirement.
    kept = record([500.0] * 8 + [100.0] * 2)
    kept["results"]["ours_best"] = {
        str(100 + i): {"mean": 500.0, "wall_s": 40.0} for i in range(10)
    }
    (bench / "recurrent_cartpole.json").write_text(json.dumps(kept))
    page.report(results, out, tmp_path / "no_runs")
    best = next(x for x in out.read_text().splitlines() if "| ours_best |" in x)
    assert "| >= 475: 10 of 10 (100-109) | 90% of seeds: met |" in best
    assert "iqm.png" not in out.read_text()  # no curves: no band drawn
    # With our runs' curves, their IQM band is drawn beside the report and linked from it.
    for run in kept["results"]["ours"].values():
        run["curve"] = [[0, 20.0], [100_000, run["mean"]]]
    (bench / "recurrent_cartpole.json").write_text(json.dumps(kept))
    page.report(results, out, tmp_path / "no_runs")
    image = "images/recurrent_cartpole_evaluation_iqm.png"
    assert f"![cartpole, evaluation seeds]({image})" in out.read_text().splitlines()
    assert (out.parent / image).stat().st_size > 0


def test_the_arm_tasks_table_closes_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(proc, "cli", lambda args: None)
    results = {"a": {"env_id": "Hopper-v5", "steps": 1000, "ours": {}, "sb3": {}}}
    out = tmp_path / "docs" / "benchmarks.md"
    (out.parent / "bench").mkdir(parents=True)
    page.report(results, out, tmp_path / "no_runs")
    assert "## Arm tasks" not in out.read_text()  # no results file: no section
    runs = {str(s): {"success_rate": 0.96, "wall_s": 60.0, "curve": [[0, 0.0], [10, 50.0]]}
            for s in (100, 101)}  # fmt: skip
    (out.parent / "bench" / "arm.json").write_text(json.dumps({"reach": runs}))
    page.report(results, out, tmp_path / "no_runs")
    text = out.read_text()
    assert "## Arm tasks" in text and "| `configs/reach.yaml` | evaluation 100, 101 |" in text
    assert "![reach, evaluation seeds](images/arm_reach_evaluation_iqm.png)" in text
    assert (out.parent / "images" / "arm_reach_evaluation_iqm.png").is_file()


def test_a_seed_in_the_results_file_is_not_trained_again(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    results_file, root = tmp_path / "kept.json", tmp_path / "bench"
    done = {"wall_s": 60.0, "eval": {"mean": 100.0}, "reached": {}}
    results_file.write_text(json.dumps({"tiny_256": {
        "env_id": "Pendulum-v1", "steps": 256, "ours": {"1": done}, "sb3": {}}}))  # fmt: skip
    out = tmp_path / "report.md"
    ran = run_script("--configs", str(config), "--seeds", "1", "--sb3-seeds", "--steps", "256",
                      "--root", str(root), "--results", str(results_file), "--out", str(out))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert not (root / "tiny_256" / "seed1").exists()  # its run folder is gone; it is not redone
    assert json.loads(results_file.read_text())["tiny_256"]["ours"]["1"] == done
    assert "| `tiny_256` | 256 | tuning 1 | 100 [100, 100] |" in out.read_text()


def test_a_config_changed_since_its_recorded_runs_is_refused(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    results_file = tmp_path / "kept.json"
    done = {"wall_s": 60.0, "eval": {"mean": 100.0}, "reached": {}}
    record = {"env_id": "Pendulum-v1", "steps": 256, "ours": {"1": done}, "sb3": {},
              "config_digest": mujoco.config_digest(config)}  # fmt: skip
    results_file.write_text(json.dumps({"tiny_256": record}))
    args = ["--configs", str(config), "--seeds", "1", "--sb3-seeds", "--steps", "256",
            "--root", str(tmp_path / "bench"), "--results", str(results_file),
            "--out", str(tmp_path / "report.md")]  # fmt: skip
    # A comment is not a setting: the recorded runs still stand.
    config.write_text("# edited\n" + config.read_text())
    assert run_script(*args).returncode == 0
    # Nor are the keys that change how it runs but not what it learns.
    data = yaml.safe_load(config.read_text())
    data["env"]["processes"] = 2
    data.setdefault("trainer", {})["torch_threads"] = 1
    config.write_text(yaml.safe_dump(data))
    assert mujoco.config_digest(config) == record["config_digest"]
    assert run_script(*args).returncode == 0
    config.write_text(config.read_text().replace("hidden_sizes:\n  - 16", "hidden_sizes:\n  - 32"))
    before = results_file.read_text(), sorted((tmp_path / "bench").rglob("*"))
    ran = run_script(*args)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert "changed since the runs recorded as 'tiny_256'" in ran.stderr
    assert (results_file.read_text(), sorted((tmp_path / "bench").rglob("*"))) == before


def test_a_record_is_saved_without_dropping_another_invocations(tmp_path):
    results_file = tmp_path / "results.json"
    a1, b, a2 = ({"env_id": "X-v5", "steps": n} for n in (1, 2, 3))
    mujoco.save_record(results_file, "a", a1)
    # Another invocation, started before "a" was written, saves its own config.
    mujoco.save_record(results_file, "b", b)
    mujoco.save_record(results_file, "a", a2)
    assert json.loads(results_file.read_text()) == {"a": a2, "b": b}


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    ran = run_script("--configs", str(tmp_path / "missing.yaml"), "--root", str(tmp_path / "b"))
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and "no such config" in ran.stderr
    assert not (tmp_path / "b").exists()
    # Stable-Baselines3 has no zoo settings here for the classic-control tasks.
    ran = run_script("--configs", str(ROOT / "configs" / "cartpole.yaml"), "--steps", "100000",
                      "--root", str(tmp_path / "b"))  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert "no RL Zoo settings here for CartPole-v1" in ran.stderr
    assert not (tmp_path / "b").exists()


def test_the_classic_control_configs_have_a_target_at_their_own_budget():
    for config in ("cartpole", "pendulum", "cartpole_grpo"):
        cfg = embodied_ppo.load_config(ROOT / "configs" / f"{config}.yaml")
        fam = tasks.family(cfg.env.id)
        assert tasks.target_of(fam, cfg.trainer.total_steps) is not None, config
        assert mujoco.record_name(ROOT / f"{config}.yaml", cfg.trainer.total_steps) == (
            f"{config}_{mujoco.steps_label(cfg.trainer.total_steps)}"
        )


def test_run_settings_reach_every_invocation_and_are_recorded(tmp_path, monkeypatch):
    """--set gives each run (fresh or resumed) the run settings, and the record names them."""
    calls = []

    def fake_cli(args):
        calls.append(args)
        if args[0] == "eval":
            Path(args[args.index("--json") + 1]).write_text(
                json.dumps({"mean_return": 1.0, "std_return": 0.0})
            )

    monkeypatch.setattr(proc, "cli", fake_cli)
    monkeypatch.setattr(mujoco, "first_reached", lambda run, thresholds: {})
    monkeypatch.setattr(mujoco, "training_curve", lambda run: [])
    config, run = write_config(tmp_path / "tiny.yaml"), tmp_path / "run"
    settings = run_settings(["trainer.torch_threads=1", "env.processes=1"])
    record = mujoco.run_ours(config, 3, 256, run, 2, settings)
    assert calls[0][:2] == ["train", str(config)]
    assert calls[0][-2:] == ["trainer.torch_threads=1", "env.processes=1"]
    assert record["settings"] == [["trainer.torch_threads=1", "env.processes=1"]]
    # An interrupted run resumes with the settings of the invocation that resumes it.
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    (run / "benchmark.json").write_text(json.dumps({"wall_s": 1.0}))
    calls.clear()
    mujoco.run_ours(config, 3, 256, run, 2, ["env.threads=2"])
    assert calls[0] == ["train", "--resume", str(run), "env.threads=2"]


@pytest.mark.parametrize("value", ["optim.lr=0.1", "trainer.torch_threads", "trainer.seed=3"])
def test_a_setting_that_changes_what_a_run_learns_is_refused(tmp_path, value):
    config = write_config(tmp_path / "tiny.yaml")
    root = tmp_path / "bench"
    ran = run_script("--configs", str(config), "--seeds", "1", "--sb3-seeds", "--steps", "256",
                      "--root", str(root), "--set", value)  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert f"--set {value}: expected KEY=VALUE" in ran.stderr
    assert not root.exists()
    arm = run_module("scripts.bench.arm", "--tasks", "reach", "--root", str(root),
                     "--results", str(tmp_path / "arm.json"), "--set", value)  # fmt: skip
    assert arm.returncode == 2 and arm.stderr.startswith("scripts.bench.arm: error: --set")
    assert not root.exists() and not (tmp_path / "arm.json").exists()


def test_a_config_with_a_periodic_evaluation_is_also_scored_by_the_policy_it_keeps(tmp_path):
    config = write_config(tmp_path / "tiny.yaml")
    settings = yaml.safe_load(config.read_text().split("\n", 2)[2])
    settings["trainer"] |= {"eval_interval": 2, "eval_episodes": 2}
    config.write_text(yaml.safe_dump(settings))
    root, out = tmp_path / "bench", tmp_path / "docs" / "benchmarks.md"
    args = ["--configs", str(config), "--seeds", "1", "--sb3-seeds", "--steps", "256"]
    ran = run_script(*args, "--root", str(root), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    record = json.loads((root / "results.json").read_text())["tiny_256"]["ours"]["1"]
    run = root / "tiny_256" / "seed1"
    kept = json.loads((run / "benchmark_eval_kept.json").read_text())
    # best.pt scored on the same 10 test episodes as the final policy, and where it was kept.
    assert len(kept["returns"]) == 10 and kept["checkpoint"].endswith("best.pt")
    final = json.loads((run / "benchmark_eval.json").read_text())
    assert final["checkpoint"].endswith("latest.pt")
    assert record["kept"]["mean"] == pytest.approx(kept["mean_return"])
    assert record["kept"]["step"] == kept["global_step"] in (128, 256)
    assert "| `tiny_256`, kept policy (best.pt) | 256 | tuning 1 |" in out.read_text()


def test_the_kept_policies_row_has_their_own_statistics_and_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(proc, "cli", lambda args: None)

    def done(final: float, kept: float | None) -> dict:
        record = {"wall_s": 60.0, "eval": {"mean": final}, "reached": {}}
        if kept is not None:
            record["kept"] = {"mean": kept, "std": 1.0, "step": 716_800}
        return record

    finals, kept = (467, 4000, 4100, 4200, 4300), (4696, 4000, 4100, 4200, 4300)
    ours = {str(s): done(f, k) for s, f, k in zip(range(100, 105), finals, kept)}
    results = {"walker2d": {"env_id": "Walker2d-v5", "steps": 1_000_000, "ours": ours, "sb3": {}}}
    out = tmp_path / "docs" / "benchmarks.md"
    (out.parent / "images").mkdir(parents=True)
    page.report(results, out, tmp_path / "no_runs")
    lines = out.read_text().splitlines()
    final_row = next(i for i, x in enumerate(lines) if x.startswith("| `walker2d` | 1,000,000"))
    row = lines[final_row + 1]  # right under the final policies' row, in the same table
    assert row.startswith("| `walker2d`, kept policy (best.pt) | 1,000,000 | evaluation 100-104 |")
    assert "| 4000 (seed 101) |" in row and "4696 (0.72M), 4000 (0.72M)" in row
    assert "> 3589, worst >= 2871: met |" in row
    assert "> 3589, worst >= 2871: **missed** |" in lines[final_row]  # 467 sinks the final one
    # A record without a kept policy (a config without periodic evaluation): no such row.
    ours["104"] = done(4300, None)
    page.report(results, out, tmp_path / "no_runs")
    assert "kept policy" not in "\n".join(
        x for x in out.read_text().splitlines() if x.startswith("| `walker2d`")
    )


def test_the_committed_report_holds_every_recorded_configs_current_header():
    # docs/benchmarks.md quotes each config's header; a header edited without regenerating
    # the report (`benchmark_mujoco.py --report-only`) leaves the page saying what the config
    # no longer says.
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    results = json.loads((ROOT / "docs" / "bench" / "mujoco.json").read_text())
    configs = {rec["config"] for rec in results.values() if "config" in rec}
    assert configs, "no config recorded in docs/bench/mujoco.json"
    for config in sorted(configs):
        header = mujoco_rows.header_comment(ROOT / config)
        assert header, f"{config} has no header"
        assert f"### `{config}`\n\n{header}\n" in page, (
            f"docs/benchmarks.md does not hold {config}'s current header: "
            "run `python -m scripts.bench.mujoco --report-only`"
        )


def test_the_committed_page_is_what_the_results_give():
    """docs/benchmarks.md is written from docs/bench (the MuJoCo, memory and arm results, with
    the images drawn beside it): a number on the page that no record gives, or a record
    changed without the page, fails here (`python -m scripts.bench.mujoco --report-only`)."""
    results = json.loads((ROOT / "docs" / "bench" / "mujoco.json").read_text())
    text = page.page_text(results, ROOT / "runs" / "benchmark", ROOT / "docs", draw=False)
    assert (ROOT / "docs" / "benchmarks.md").read_text() == text, (
        "docs/benchmarks.md is not what its records give: run "
        "`python -m scripts.bench.mujoco --report-only`"
    )
