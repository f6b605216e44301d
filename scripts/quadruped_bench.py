"""Collect quadruped runs into one JSON for docs/bench: each run's config overrides, wall time,
steps, its learning curve (training and periodic-evaluation metrics) and its eval.json files.

    python scripts/quadruped_bench.py --out docs/bench/quadruped_flat.json \\
        --run seed0=/work/legged_runs/flat_s0 --run seed1=/work/legged_runs/flat_s1 \\
        --eval seed0:main=/work/legged_runs/flat_s0/eval.json --note "..."

Curves keep every `--every`-th iteration (and every iteration with a periodic evaluation).
Time is the run's training time, resumes stitched as scripts/quadruped_curve.py does.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import yaml
from quadruped_curve import read_run

KEYS = (
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "metrics/tracking_error_lin",
    "metrics/tracking_error_yaw",
    "metrics/fall_rate",
    "metrics/terrain_level",
    "eval/metrics/tracking_error_lin",
    "eval/metrics/tracking_error_yaw",
    "eval/metrics/fall_rate",
    "eval/metrics/terrain_level",
    "eval/episodic_return",
    "losses/std",
)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def curve(run: Path, every: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, wall = read_run(run)
    points = []
    for i, row in enumerate(rows):
        if i % every and "eval/metrics/tracking_error_lin" not in row and i != len(rows) - 1:
            continue
        point = {"step": row["global_step"], "time_s": round(row["wall"], 1)}
        point.update({k: _clean(row[k]) for k in KEYS if k in row})
        points.append(point)
    last = rows[-1]
    summary = {
        "steps": last["global_step"],
        "iterations": last["iteration"],
        "wall_s": round(wall, 1),
    }
    return points, summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR")
    p.add_argument("--eval", action="append", default=[], metavar="NAME:LABEL=EVAL_JSON")
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--note", default="")
    args = p.parse_args()
    runs: dict[str, Any] = {}
    for item in args.run:
        name, _, path = item.partition("=")
        run = Path(path)
        config = yaml.safe_load((run / "config.yaml").read_text())
        points, summary = curve(run, args.every)
        runs[name] = {
            "run_dir": str(run),
            "env_id": config["env"]["id"],
            "seed": config["trainer"]["seed"],
            "env_kwargs": config["env"]["kwargs"],
            **summary,
            "curve": points,
            "eval": {},
        }
    for item in args.eval:
        key, _, path = item.partition("=")
        name, _, label = key.partition(":")
        data = json.loads(Path(path).read_text())
        data.pop("episode_logs", None)  # per-episode logs: the means are kept
        runs[name]["eval"][label] = data
    out = {"note": args.note, "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
