"""scripts/bench/quadruped.py: resumed runs stitched, the terrain panel of rough-ground runs, and
the record of runs with its provenance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from bench_support import run_module
from PIL import Image
from support import ROOT

from scripts.bench.lib.runs import stitched


def write_run(run: Path, rows: list[dict]) -> Path:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def row(step: int, time: float, **extra: float) -> dict:
    return {"global_step": step, "iteration": step // 100, "time": time,
            "metrics/tracking_error_lin": 0.3, "charts/episodic_return": 1.0, **extra}  # fmt: skip


def test_a_resumed_run_adds_up_its_stretches_and_drops_replayed_steps(tmp_path):
    # Stopped after step 300 (checkpoint at 200), resumed from 200 with a clock from 0.
    run = write_run(tmp_path / "run", [row(100, 10.0), row(200, 20.0), row(300, 30.0),
                                       row(300, 12.0), row(400, 22.0)])  # fmt: skip
    rows, seconds = stitched(run)
    assert [r["global_step"] for r in rows] == [100, 200, 300, 400]
    # The time of the steps done twice (200 to 300 before the stop) counts once: 20 s to the
    # checkpoint, then the resumed process's 22 s.
    assert seconds == 20.0 + 22.0
    assert [r["wall"] for r in rows] == [10.0, 20.0, 32.0, 42.0]


def test_rough_ground_runs_get_a_terrain_level_panel(tmp_path):
    flat = write_run(tmp_path / "flat", [row(s, s / 10) for s in (100, 200, 300)])
    rough = write_run(
        tmp_path / "rough",
        [row(s, s / 10, **{"metrics/terrain_level": s / 100}) for s in (100, 200, 300)],
    )

    def width(*runs: Path) -> int:
        out = tmp_path / f"{len(runs)}.png"
        ran = run_module("scripts.bench.quadruped", "curve", *map(str, runs), "--out", str(out))
        assert ran.returncode == 0, ran.stderr
        with Image.open(out) as image:
            return image.width

    # Four panels of 4.2 inches at 90 dpi for flat ground; a fifth where a run has terrain levels.
    assert abs(width(flat) - 4 * 4.2 * 90) <= 2
    assert abs(width(flat, rough) - 5 * 4.2 * 90) <= 2


def test_a_record_of_runs_keeps_their_curves_evaluations_and_provenance(tmp_path):
    step_size = {"charts/learning_rate": 1e-5, "losses/approx_kl": 0.016, "charts/other": 1.0}
    run = write_run(tmp_path / "run", [row(s, s / 10, **step_size) for s in (100, 200, 300)])
    (run / "config.yaml").write_text(
        "env: {id: EmbodiedPPO/QuadrupedFlat-v0, kwargs: {}}\ntrainer: {seed: 3}\n"
    )
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps({"mean_return": 5.0, "episode_logs": [{"x": 1}]}))
    out = tmp_path / "quadruped.json"
    ran = run_module("scripts.bench.quadruped", "record", "--out", str(out), "--run",
                     f"seed3={run}", "--eval", f"seed3:main={ev}", "--every", "2")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    record = json.loads(out.read_text())
    seed = record["runs"]["seed3"]
    assert (seed["seed"], seed["steps"], seed["wall_s"]) == (3, 300, 30.0)
    assert [p["step"] for p in seed["curve"]] == [100, 300]  # every 2nd row and the last
    # The adaptive learning rate and the KL it reads are kept; a metric not kept is dropped.
    assert seed["curve"][0]["charts/learning_rate"] == 1e-5
    assert seed["curve"][0]["losses/approx_kl"] == 0.016 and "charts/other" not in seed["curve"][0]
    assert seed["eval"] == {"main": {"mean_return": 5.0}}  # per-episode logs dropped
    assert record["provenance"]["command"].startswith("python -m scripts.bench.quadruped record")
    # An evaluation of a run not named by --run is refused in one line, nothing written.
    out.unlink()
    ran = run_module("scripts.bench.quadruped", "record", "--out", str(out), "--run",
                     f"seed3={run}", "--eval", f"seed9:main={ev}")  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and not out.exists()


def test_a_records_window_means_every_row_in_its_range_not_only_the_curves(tmp_path):
    yaws = {100: 0.9, 200: 0.5, 300: 0.4, 400: 0.3, 500: 0.1}
    rows = [row(s, s / 10, **{"metrics/tracking_error_yaw": y}) for s, y in yaws.items()]
    rows[2]["metrics/tracking_error_yaw"] = None  # a row without the metric does not count
    run = write_run(tmp_path / "run", rows)
    (run / "config.yaml").write_text("env: {id: E-v0, kwargs: {}}\ntrainer: {seed: 3}\n")
    out = tmp_path / "window.json"
    ran = run_module("scripts.bench.quadruped", "record", "--out", str(out), "--run",
                     f"r={run}", "--every", "4", "--window", "200", "500")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    seed = json.loads(out.read_text())["runs"]["r"]
    # Steps 200 and 400 (300 has no yaw; 500 is past the range), though the curve keeps only
    # steps 100 and 500.
    assert [p["step"] for p in seed["curve"]] == [100, 500]
    assert seed["window"]["means"]["metrics/tracking_error_yaw"] == pytest.approx((0.5 + 0.3) / 2)
    assert seed["window"]["rows"]["metrics/tracking_error_yaw"] == 2
    assert seed["window"]["means"]["metrics/tracking_error_lin"] == pytest.approx(0.3)
    assert (seed["window"]["from_step"], seed["window"]["to_step"]) == (200, 500)
    # An empty or reversed range is refused in one line, nothing written.
    out.unlink()
    ran = run_module("scripts.bench.quadruped", "record", "--out", str(out), "--run",
                     f"r={run}", "--window", "500", "200")  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and not out.exists()


# ------------------------------------------------------------------ time to target
def evaluated(step: int, time: float, lin: float, yaw: float = 0.1, falls: float = 0.0) -> dict:
    return {"global_step": step, "iteration": step // 100, "time": time,
            "eval/metrics/tracking_error_lin": lin, "eval/metrics/tracking_error_yaw": yaw,
            "eval/metrics/fall_rate": falls}  # fmt: skip


def test_the_time_to_target_is_the_first_evaluation_from_which_all_meet_them():
    from scripts.bench.lib import legged

    rows = [
        row(100, 10.0),
        evaluated(200, 20.0, 0.12),  # met, but not kept: the next one misses
        evaluated(300, 30.0, 0.12, falls=0.1),
        evaluated(400, 40.0, 0.14, yaw=0.19),  # from here on, every one meets them
        row(500, 50.0),
        evaluated(600, 60.0, 0.11),
    ]
    # Each row arrived 7 s after its `time` (the command's start-up), one 0.2 s later still.
    arrivals = [r["time"] + 7.0 + (0.2 if i == 2 else 0.0) for i, r in enumerate(rows)]
    reached = legged.time_to_target(rows, arrivals, legged.FLAT)
    assert reached["step"] == 400 and reached["wall_s"] == 47.0 and reached["start_up_s"] == 7.0
    assert [e["step"] for e in reached["evaluations"]] == [200, 300, 400, 600]
    assert legged.time_to_target(rows[:5], arrivals, legged.FLAT)["step"] == 400
    never = [row(100, 1.0), evaluated(200, 2.0, 0.16)]
    assert legged.time_to_target(never, [3.0, 4.0], legged.FLAT)["step"] is None
    # First met, kept or not: the evaluation at 200.
    assert legged.first_met(reached["evaluations"], legged.FLAT) == 0
    assert legged.first_met(reached["evaluations"][1:], legged.FLAT) == 1  # at 400
    assert legged.first_met(legged.evaluations(never), legged.FLAT) is None


def test_the_sweep_counts_the_episodes_within_the_training_bounds_and_the_main_ones():
    from scripts.bench.lib import legged

    def sweep(key: str, value: object, falls: float) -> dict:
        return {"key": key, "value": value, "fall_rate": falls}

    ev = {"episodes": 20, "fall_rate": 0.05, "sweep": [
        sweep("env.kwargs.randomization.friction", [0.4, 0.4], 0.1),
        sweep("env.kwargs.randomization.added_mass", [1.0, 1.0], 0.0),
        sweep("env.kwargs.randomization.push_velocity", 0.0, 0.05),
        sweep("env.kwargs.randomization.push_velocity", 1.0, 0.5),  # beyond training
        sweep("env.kwargs.randomization.push_interval_s", 2.0, 0.5),  # beyond training
    ]}  # fmt: skip
    assert legged.sweep_falls(ev) == (1 + 2 + 0 + 1, 4 * 20)


def test_a_seed_that_never_met_the_targets_counts_as_late_in_the_iqm():
    from scripts.bench.report.legged import iqm_or_inf

    assert iqm_or_inf([300.0, 400.0, 500.0, 600.0]) == 450.0
    assert iqm_or_inf([300.0, 400.0, 500.0, 600.0, float("inf")]) == pytest.approx(500.0)
    assert iqm_or_inf([300.0, float("inf"), float("inf"), 400.0]) == float("inf")


def test_targets_trains_each_seed_evaluates_it_and_writes_the_record_and_the_page(tmp_path):
    config = yaml.safe_load((ROOT / "configs" / "quadruped_flat.yaml").read_text())
    config["env"].update(num_envs=2, max_episode_steps=20)
    config["model"]["hidden_sizes"] = [16]
    config["algorithm"].update(rollout_steps=8, minibatch_size=16)
    config["trainer"].update(total_steps=64, eval_interval=2, eval_episodes=1,
                             checkpoint_interval=2, compile=False)  # fmt: skip
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    page = tmp_path / "legged.md"
    marks = ("<!-- generated by python -m scripts.bench.quadruped targets: flat -->",
             "<!-- end of generated block: flat -->")  # fmt: skip
    page.write_text(f"# Legged\n\n{marks[0]}\nold\n{marks[1]}\n\nafter\n")
    out, runs = tmp_path / "targets.json", tmp_path / "runs"
    args = ["targets", "--config", str(path), "--seeds", "3", "--runs", str(runs),
            "--episodes", "1", "--out", str(out), "--page", str(page)]  # fmt: skip
    ran = run_module("scripts.bench.quadruped", *args)
    assert ran.returncode == 0, ran.stderr
    record = json.loads(out.read_text())
    seed = record["seeds"]["3"]
    assert seed["steps"] == 64 and len(seed["target"]["evaluations"]) == 2
    assert 0 < seed["target"]["start_up_s"] < seed["command_wall_s"]
    assert len(seed["final"]["sweep"]) == 7 and seed["final"]["episodes"] == 1
    assert record["summary"]["seeds"] == 1 and record["provenance"]["command"].startswith(
        "python -m scripts.bench.quadruped targets"
    )
    text = page.read_text()
    assert "old" not in text and text.endswith(f"{marks[1]}\n\nafter\n")
    assert "| 3 |" in text and "Targets met and kept by" in text and "first met, IQM" in text
    # Runs are never overwritten: an existing run folder is refused in one line.
    ran = run_module("scripts.bench.quadruped", *args)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and "exists" in ran.stderr

    # --add trains the seeds the record lacks and writes it over all of them, naming both
    # invocations; --block picks the page's block. A seed already in it, or other settings,
    # are refused in one line before anything trains, the record untouched.
    before = out.read_text()
    refused = {
        "already in": [*args[:4], "3", *args[5:], "--add"],
        "episodes": [*args[:4], "4", *args[5:8], "2", *args[9:], "--add"],
    }
    for fragment, bad in refused.items():
        ran = run_module("scripts.bench.quadruped", *bad)
        assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
        assert fragment in ran.stderr and out.read_text() == before
    page.write_text(text + "\n<!-- generated by python -m scripts.bench.quadruped targets: sym -->"
                    "\nold\n<!-- end of generated block: sym -->\n")  # fmt: skip
    ran = run_module("scripts.bench.quadruped", *args[:4], "4", *args[5:], "--add",
                     "--block", "sym")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    record = json.loads(out.read_text())
    assert sorted(record["seeds"]) == ["3", "4"] and record["summary"]["seeds"] == 2
    assert "--seeds 3 " in record["earlier"][0]["command"]
    assert "--seeds 4 " in record["provenance"]["command"]
    text = page.read_text()
    assert text.count("| 3 |") == 2 and text.count("| 4 |") == 1 and "old" not in text


@pytest.mark.parametrize("config", [None, "configs/quadruped_rough.yaml"], ids=["flat", "rough"])
def test_the_physics_worker_measures_mujoco_against_the_env_on_the_states_training_visits(config):
    where = ["--config", config] if config else []
    ran = run_module("scripts.bench.workers.quadruped_physics", "--steps", "200", "--rounds", "1",
                     *where, "env.num_envs=4", "algorithm.minibatch_size=32")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["mj_step_fast_per_s"] > 0  # the task's fast physics, on its own terrain
    assert out["physics_steps_per_policy_step"] == 4  # 200 Hz physics under a 50 Hz policy
    assert out["limit_policy_steps_per_s"] == pytest.approx(out["mj_step_per_s"] / 4)
    # Rates, not compared here (a test asserts no timing): the benchmark's record compares them.
    assert out["member_steps_per_s"] > 0 and out["vector_steps_per_s"] > 0
    assert out["num_envs"] == 4 and len(out["rounds"]["mj_step"]) == 1


def test_the_physics_rate_does_not_subtract_a_pass_that_lost_its_core(monkeypatch):
    import time
    import types

    import mujoco

    from scripts.bench.workers import quadruped_physics

    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body></worldbody></mujoco>"
    )
    data = mujoco.MjData(model)
    kind = mujoco.mjtState.mjSTATE_INTEGRATION
    states = []
    for _ in range(200):
        mujoco.mj_step(model, data)
        state = np.empty(mujoco.mj_stateSize(model, kind))
        mujoco.mj_getState(model, data, state, kind)
        states.append(state)
    alone = quadruped_physics.physics_rate(model, states)
    # The first stretch that only sets states (no mj_step) looks 1 s long: the process lost its
    # core there. Subtracted from the stepping pass's time, it would make the rate negative.
    calls = {"set": 0, "step": 0, "lost": 0.0}
    real_set, real_step = mujoco.mj_setState, mujoco.mj_step

    def counted(name, fn):
        def call(*a):
            calls[name] += 1
            return fn(*a)

        return call

    def clock() -> float:
        if calls["set"] and not calls["step"] and not calls["lost"]:
            calls["lost"] = 1.0
        calls["set"] = calls["step"] = 0
        return time.perf_counter() + calls["lost"]

    monkeypatch.setattr(mujoco, "mj_setState", counted("set", real_set))
    monkeypatch.setattr(mujoco, "mj_step", counted("step", real_step))
    monkeypatch.setattr(quadruped_physics, "time", types.SimpleNamespace(perf_counter=clock))
    rate = quadruped_physics.physics_rate(model, states)
    assert calls["lost"] == 1.0  # the stall happened
    assert 0.2 < rate / alone < 5


def test_the_cores_model_gives_back_its_measurements_and_is_bounded_by_the_serial_parts():
    from scripts.bench.lib.legged import Costs, cores_model

    c = Costs(physics_us=50, env_us=70, collect_us=90, update_us=40, update2_us=25, eval_us=5)
    # On one core (one process) it is the measured one-thread run: 90 + 40 + 5 us a step.
    assert cores_model(c, 1, processes=1) == pytest.approx(1e6 / 135)
    # On two: the physics halved, the env's Python over both processes, the update's 2-thread
    # time: 25 + 10 + 20 (inference and bookkeeping) + 25 + 5.
    assert cores_model(c, 2) == pytest.approx(1e6 / 85)
    rates = [cores_model(c, n) for n in (2, 4, 16, 1024)]
    assert rates == sorted(rates)
    # What never parallelizes bounds it: inference and bookkeeping, the update's serial part
    # (10 us: Amdahl's law through 40 and 25), the env's Python over two processes, evaluation.
    assert rates[-1] < 1e6 / (20 + 10 + 10 + 5)
