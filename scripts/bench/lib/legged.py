"""The quadruped's targets and how a run meets them: the periodic evaluation's first evaluation
from which every one meets the targets (time to target, in env steps and in wall seconds from
the training command), training processes watched as they write their metrics, and the final
evaluation with its robustness sweep.

Wall time from the command: a training process writes one metrics.jsonl row per logged
iteration, whose `time` counts from its trainer's start (after imports, env creation and
checks). `watch` polls the file while the process runs and records when each row arrived,
seconds after the command started; a row's wall time from the command is its `time` plus the
smallest gap seen between arrival and `time` (the start-up the `time` leaves out; the polling
adds at most `POLL_S`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.25


@dataclass(frozen=True)
class Targets:
    """What an evaluation must show: mean tracking errors at most `lin` (m/s) and `yaw`
    (rad/s), and a share of falls at most `falls`."""

    lin: float
    yaw: float
    falls: float

    def met(self, lin: float, yaw: float, falls: float) -> bool:
        """Whether an evaluation of these errors and falls meets the targets."""
        return lin <= self.lin and yaw <= self.yaw and falls <= self.falls


# docs/legged.md: flat ground; rough ground from terrain level 4.
FLAT = Targets(lin=0.15, yaw=0.2, falls=0.0)
ROUGH = Targets(lin=0.25, yaw=1e9, falls=0.05)
# The robustness sweep of docs/legged.md: each value fixed for every episode, the others as
# trained (friction 0.4 and 1.25, a payload of -1 and +1 kg, no pushes: the rows whose falls
# count against the 5% of the targets; pushes 4x as often and twice as hard: beyond training).
SWEEP = (
    "env.kwargs.randomization.friction=[[0.4,0.4],[1.25,1.25]]",
    "env.kwargs.randomization.added_mass=[[-1.0,-1.0],[1.0,1.0]]",
    "env.kwargs.randomization.push_velocity=[0.0,1.0]",
    "env.kwargs.randomization.push_interval_s=[2.0]",
)
IN_BOUNDS = {
    ("env.kwargs.randomization.friction", "[0.4, 0.4]"),
    ("env.kwargs.randomization.friction", "[1.25, 1.25]"),
    ("env.kwargs.randomization.added_mass", "[-1.0, -1.0]"),
    ("env.kwargs.randomization.added_mass", "[1.0, 1.0]"),
    ("env.kwargs.randomization.push_velocity", "0.0"),
}
ROUGH_LEVELS = "env.kwargs.terrain_options.initial_level=[4,9]"


def evaluations(rows: Sequence[dict]) -> list[dict]:
    """The periodic evaluations of a run's rows: step, time, errors, falls."""
    return [
        {
            "step": r["global_step"],
            "time": r["time"],
            "lin": r["eval/metrics/tracking_error_lin"],
            "yaw": r["eval/metrics/tracking_error_yaw"],
            "falls": r["eval/metrics/fall_rate"],
        }
        for r in rows
        if "eval/metrics/tracking_error_lin" in r
    ]


def first_kept(evals: Sequence[dict], targets: Targets) -> int | None:
    """The index of the first evaluation from which every evaluation meets `targets`."""
    first = None
    for i, e in enumerate(evals):
        if targets.met(e["lin"], e["yaw"], e["falls"]):
            first = i if first is None else first
        else:
            first = None
    return first


def first_met(evals: Sequence[dict], targets: Targets) -> int | None:
    """The index of the first evaluation that meets `targets` (kept or not afterwards)."""
    return next(
        (i for i, e in enumerate(evals) if targets.met(e["lin"], e["yaw"], e["falls"])), None
    )


def start_up(rows: Sequence[dict], arrivals: Sequence[float]) -> float:
    """Seconds from the command to its trainer's clock start: the smallest gap between a row's
    arrival (seconds after the command) and its `time`."""
    gaps = [a - r["time"] for r, a in zip(rows, arrivals, strict=False) if "time" in r]
    return max(0.0, min(gaps)) if gaps else 0.0


def time_to_target(rows: list[dict], arrivals: list[float], targets: Targets) -> dict[str, Any]:
    """When a run's periodic evaluation first met `targets` and kept them: the step and the
    wall seconds from the command (None where it never did), the evaluations and the start-up."""
    evals = evaluations(rows)
    offset = start_up(rows, arrivals)
    first = first_kept(evals, targets)
    return {
        "step": None if first is None else evals[first]["step"],
        "wall_s": None if first is None else round(evals[first]["time"] + offset, 1),
        "start_up_s": round(offset, 1),
        "evaluations": [{**e, "wall_s": round(e["time"] + offset, 1)} for e in evals],
    }


def watch(cmd: list[str], run_dir: Path, cwd: Path, env: dict | None = None) -> list[float]:
    """Run a training command to its end, recording when each of its metrics.jsonl rows arrived
    (seconds after the command started); a failure stops the benchmark with its error output."""
    metrics = run_dir / "metrics.jsonl"
    start = time.monotonic()
    arrivals: list[float] = []
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        job = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        while True:
            done = job.poll() is not None
            if metrics.is_file():
                lines = metrics.read_text().count("\n")
                arrivals += [time.monotonic() - start] * (lines - len(arrivals))
            if done:
                break
            time.sleep(POLL_S)
    if job.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {job.returncode}); its output: {log.name}")
    return arrivals


def read_rows(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl rows."""
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def sweep_falls(ev: dict) -> tuple[int, int]:
    """Falls and episodes of an eval.json's main episodes (as trained) and its sweep rows within
    the training bounds (`IN_BOUNDS`)."""
    rows = [ev] + [s for s in ev.get("sweep", []) if (s["key"], str(s["value"])) in IN_BOUNDS]
    falls = sum(round(s["fall_rate"] * ev["episodes"]) for s in rows)
    return falls, len(rows) * ev["episodes"]


@dataclass(frozen=True)
class Costs:
    """Measured costs per env step (microseconds) of the quadruped's training, what
    `cores_model` predicts from.

    Attributes:
        physics_us: MuJoCo's physics steps of one env step, one core.
        env_us: the vector env's whole step per env, one core (physics included).
        collect_us: a training's collection per env step, everything on one core (the env, the
            policy's inference, the collector's bookkeeping).
        update_us: its update per env step on one thread; `update2_us` on two.
        eval_us: its periodic evaluation's time per env step trained.
    """

    physics_us: float
    env_us: float
    collect_us: float
    update_us: float
    update2_us: float
    eval_us: float


def cores_model(c: Costs, cores: int, processes: int = 2) -> float:
    """Predicted training env steps per second on `cores` cores with the quadruped configs'
    settings (`processes` env processes, each with its share of the cores for the physics,
    the update on every core): the physics parallel over every core, the env's own Python
    over the processes, the policy's inference and the collector's work in the training
    process alone, the update by Amdahl's law fitted to its 1- and 2-thread times, the
    evaluation as measured (one process)."""
    python_us = max(0.0, c.env_us - c.physics_us)
    serial_us = max(0.0, c.collect_us - c.env_us)
    collect = c.physics_us / cores + python_us / min(processes, cores) + serial_us
    serial_part = min(1.0, max(0.0, 2.0 * c.update2_us / c.update_us - 1.0))
    update = c.update_us * (serial_part + (1.0 - serial_part) / cores)
    return 1e6 / (collect + update + c.eval_us)
