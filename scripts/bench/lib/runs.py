"""Training runs as the benchmarks start and read them: run settings, curves, resumed clocks, and
finished runs with their evaluations collected into a record's `runs`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.bench.lib.args import BadInput

# How a run runs, not what it learns: what `--set` may give every run of an invocation (e.g.
# one thread each where several runs share the machine; docs/performance.md).
RUN_SETTINGS = ("trainer.torch_threads", "env.threads", "env.processes")
# What a legged run's curve keeps of each metrics row (scripts.bench.quadruped, distillation).
CURVE_KEYS = (
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
    "losses/approx_kl",  # what the adaptive learning rate reads
    "charts/learning_rate",
    "losses/mirror_loss",  # algorithm.symmetry: the policy's asymmetry
)


def run_settings(values: Sequence[str]) -> list[str]:
    """`--set` values as train overrides, each KEY=VALUE with KEY one of RUN_SETTINGS."""
    for value in values:
        key, eq, _ = value.partition("=")
        if not eq or key not in RUN_SETTINGS:
            raise BadInput(
                f"--set {value}: expected KEY=VALUE with KEY one of {', '.join(RUN_SETTINGS)}"
            )
    return list(values)


def metrics(run: Path) -> list[dict]:
    """The rows of a run's metrics.jsonl, as logged."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def first_reached(run: Path, thresholds: Sequence[float]) -> dict[str, list[float] | None]:
    """For each threshold, (steps, training seconds) when the logged training return first
    reached it, or None. Training seconds continue across resumes (each process's clock
    restarts at 0: its times are added to where the previous one stopped)."""
    offset, last, points = 0.0, 0.0, []
    for row in metrics(run):
        if row["time"] < last:  # a resumed process
            offset += last
        last = row["time"]
        if "charts/episodic_return" in row:
            points.append((row["global_step"], offset + row["time"], row["charts/episodic_return"]))
    out: dict[str, list[float] | None] = {}
    for threshold in thresholds:
        hit = next(((s, t) for s, t, r in points if r >= threshold), None)
        out[str(threshold)] = None if hit is None else [hit[0], hit[1]]
    return out


def training_curve(run: Path, points: int = 200) -> list[list[float]]:
    """The logged training return against steps, thinned to at most `points` rows
    ([step, return]): kept in the results file, so the IQM band is redrawn without the runs."""
    rows = [
        [row["global_step"], round(float(row["charts/episodic_return"]), 2)]
        for row in metrics(run)
        if "charts/episodic_return" in row
    ]
    if len(rows) > points:
        keep = sorted({round(i * (len(rows) - 1) / (points - 1)) for i in range(points)})
        rows = [rows[i] for i in keep]
    return rows


def stitched(run: Path) -> tuple[list[dict], float]:
    """The rows of one run, resumes stitched, each with its `wall` time, and the run's training
    time in seconds. A resumed run continues from its checkpoint's step with a clock that
    starts again at 0: its time is the sum of the stretches (the steps logged after the last
    checkpoint before a stop were done again; their first time is not counted)."""
    rows: list[dict] = []
    offset = 0.0
    for row in metrics(run):
        if rows and row["global_step"] <= rows[-1]["global_step"]:  # replayed steps
            rows = [r for r in rows if r["global_step"] < row["global_step"]]
        if rows and row.get("time", 0.0) + offset < rows[-1]["wall"]:  # the clock restarted
            offset = rows[-1]["wall"]
        row["wall"] = offset + row.get("time", 0.0)
        rows.append(row)
    return rows, rows[-1]["wall"] if rows else 0.0


def _clean(value: Any) -> Any:
    """A metric as JSON keeps it: a non-finite float as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def curve(run: Path, every: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's curve points (every `every`-th row, every evaluated row and the last) and its
    steps, iterations and training time."""
    rows, wall = stitched(run)
    points = []
    for i, row in enumerate(rows):
        if i % every and "eval/metrics/tracking_error_lin" not in row and i != len(rows) - 1:
            continue
        point = {"step": row["global_step"], "time_s": round(row["wall"], 1)}
        point.update({k: _clean(row[k]) for k in CURVE_KEYS if k in row})
        points.append(point)
    last = rows[-1]
    summary = {"steps": last["global_step"], "iterations": last["iteration"],
               "wall_s": round(wall, 1)}  # fmt: skip
    return points, summary


def window_means(run: Path, start: int, stop: int) -> dict[str, Any]:
    """The mean of each training metric of the curve over every row of `run` with a step in
    [start, stop) (not only the rows a curve keeps), and how many rows each mean holds."""
    rows = [r for r in stitched(run)[0] if start <= r["global_step"] < stop]
    means: dict[str, float] = {}
    counts: dict[str, int] = {}
    for key in CURVE_KEYS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        values = [v for v in values if math.isfinite(v)]
        if values and not key.startswith("eval/"):
            means[key], counts[key] = sum(values) / len(values), len(values)
    return {"from_step": start, "to_step": stop, "rows": counts, "means": means}


def collect(
    runs: dict[str, Path],
    evals: dict[tuple[str, str], Path],
    every: int,
    window: tuple[int, int] | None = None,
) -> dict:
    """Runs (by name) and their evaluations (by run name and label) as a record's `runs`: per
    run its env, seed and env kwargs, steps, iterations and training time, its curve (every
    `every`-th row), its eval.json files (their per-episode logs dropped), and with `window`
    (from_step, to_step) its training metrics' means over every row in that range."""
    import yaml

    out: dict[str, Any] = {}
    for name, run in runs.items():
        config = yaml.safe_load((run / "config.yaml").read_text())
        points, summary = curve(run, every)
        out[name] = {
            "run_dir": str(run),
            "env_id": config["env"]["id"],
            "seed": config["trainer"]["seed"],
            "env_kwargs": config["env"]["kwargs"],
            **summary,
            "curve": points,
            "eval": {},
        }
        if window is not None:
            out[name]["window"] = window_means(run, *window)
    for (name, label), path in evals.items():
        data = json.loads(path.read_text())
        data.pop("episode_logs", None)  # per-episode logs: the means are kept
        out[name]["eval"][label] = data
    return out
