"""scripts/bench/quadruped.py: resumed runs stitched, the terrain panel of rough-ground runs, and
the record of runs with its provenance."""

from __future__ import annotations

import json
from pathlib import Path

from bench_support import run_module
from PIL import Image

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
    run = write_run(tmp_path / "run", [row(s, s / 10) for s in (100, 200, 300)])
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
    assert seed["eval"] == {"main": {"mean_return": 5.0}}  # per-episode logs dropped
    assert record["provenance"]["command"].startswith("python -m scripts.bench.quadruped record")
    # An evaluation of a run not named by --run is refused in one line, nothing written.
    out.unlink()
    ran = run_module("scripts.bench.quadruped", "record", "--out", str(out), "--run",
                     f"seed3={run}", "--eval", f"seed9:main={ev}")  # fmt: skip
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1 and not out.exists()
