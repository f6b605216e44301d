"""Training runs as the benchmarks start and read them: run settings, curves, resumed clocks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from scripts.bench.lib.args import BadInput

# How a run runs, not what it learns: what `--set` may give every run of an invocation (e.g.
# one thread each where several runs share the machine; docs/performance.md).
RUN_SETTINGS = ("trainer.torch_threads", "env.threads", "env.processes")


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
