"""The memory tasks' statistics (scripts.bench.recurrent's results files,
docs/bench/recurrent_<task>.json): the table it prints, the section of docs/benchmarks.md and
the IQM bands of our contenders' training returns."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

from scripts.bench.lib import stats
from scripts.bench.lib.plots import plot_bands
from scripts.bench.lib.tasks import MEMORY_REQUIRED_SHARE, MEMORY_TASKS

# Our contenders, whose runs keep a training curve (sb3 keeps none).
OURS = ("ours", "ours_best", "memoryless")


def summaries(record: dict) -> Iterator[tuple[str, str, stats.Summary, float]]:
    """Per contender and set of seeds (tuning, evaluation) of a results file: the contender's
    name, the group, the statistics of its evaluation returns against the task's target
    (lib/stats.py) and its mean wall time."""
    target = MEMORY_TASKS[record["task"]]["target"]
    for name, per_seed in record["results"].items():
        for group, runs in stats.by_group(per_seed).items():
            means = {s: r["mean"] for s, r in runs.items()}
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            yield name, group, stats.summarize(means, target), wall


def summary_lines(record: dict) -> list[str]:
    """The table of a results file: per contender and set of seeds, the statistics of the
    evaluation returns (lib/stats.py) and the mean wall time."""
    target = MEMORY_TASKS[record["task"]]["target"]
    lines = [
        f"{record['task']}: {record['steps']:,} steps, {record['episodes']} deterministic "
        f"episodes per seed, target {target:g}; IQM [95% bootstrap CI, "
        f"{stats.RESAMPLES:,} resamples]",
        f"{'contender':>26} | seeds | IQM [95% CI] | median | worst (seed) | at target | "
        "mean wall time | steps/s",
    ]
    for name, group, summary, wall in summaries(record):
        cell = stats.cells(summary, ".1f")
        lines.append(
            f"{name:>26} | {group} {cell['seeds']} | {cell['iqm']} | {cell['median']} | "
            f"{cell['worst']} | {cell['at_target']} | {wall:.0f} s | "
            f"{record['steps'] / wall:,.0f}"
        )
    return lines


def plot(record: dict, images: Path, draw: bool = True) -> list[Path]:
    """Per set of seeds (evaluation, tuning), the IQM band of the training return of each of
    our contenders with a curve for every seed, at least two seeds, into
    images/recurrent_<task>_<set>_iqm.png; the images written (where `draw`; otherwise those
    of them already there)."""
    written = []
    for group in stats.GROUPS:
        bands = {}
        for name in OURS:
            runs = stats.by_group(record["results"].get(name, {})).get(group, {})
            curves = {s: ([p[0] for p in r["curve"]], [p[1] for p in r["curve"]])
                      for s, r in runs.items() if r.get("curve")}  # fmt: skip
            if len(curves) > 1 and len(curves) == len(runs):
                label = f"{name}, seeds {stats.seeds_text(list(runs))}"
                bands[label] = stats.curve_band(curves)
        if bands:
            out = images / f"recurrent_{record['task']}_{group}_iqm.png"
            if draw:
                title = f"{record['task']}, {group} seeds"
                plot_bands(bands, out, title, ylabel="training return (stochastic)")
            if draw or out.is_file():
                written.append(out)
    return written


def memory_lines(bench: Path, draw: bool = True) -> list[str]:
    """The memory tasks' section of docs/benchmarks.md: per task, contender and set of seeds,
    the statistics of the results files bench/recurrent_<task>.json beside the report, and the
    IQM bands of our contenders' training returns (drawn into images/ beside it where `draw`);
    empty where there are none."""
    rows, notes, curves = [], [], []
    for path in sorted(bench.glob("recurrent_*.json")):
        record = json.loads(path.read_text())
        task = MEMORY_TASKS.get(record.get("task"))
        if task is None:
            continue
        for name, group, summary, wall in summaries(record):
            cell = stats.cells(summary, ".1f")
            held = "-"
            if group == "evaluation" and name in ("ours", "ours_best"):
                met = summary.fraction_at_target >= MEMORY_REQUIRED_SHARE
                held = f"{MEMORY_REQUIRED_SHARE:.0%} of seeds: {'met' if met else '**missed**'}"
            rows.append(
                f"| `{task['config']}` | {record['steps']:,} | {name} | {group} "
                f"{cell['seeds']} | {cell['iqm']} | {cell['median']} | {cell['worst']} | "
                f">= {task['target']:g}: {cell['at_target']} | {held} | "
                f"{', '.join(f'{m:.1f}' for m in summary.values)} | {wall:.0f} s |"
            )
        if record.get("note"):
            notes.append(f"- `{path.name}`: {record['note']}")
        for image in plot(record, bench.parent / "images", draw):
            group = image.stem.split("_")[-2]
            curves.append(f"![{record['task']}, {group} seeds](images/{image.name})")
    if not rows:
        return []
    return [
        "## Memory tasks",
        "",
        "From docs/bench/recurrent_*.json (`python -m scripts.bench.recurrent --summarize FILE` "
        "prints the same). Each seed: deterministic evaluation of 20 episodes after the budget. "
        "`ours`: the config as committed; `memoryless`: the same without its LSTM; `sb3`: "
        "RecurrentPPO with RL Baselines3 Zoo's settings for the task; `*_rl_zoo_settings`: ours "
        "with the zoo's hyperparameters; `ours_best`: the committed config trained with its own "
        "periodic evaluation, scored by the policy it keeps as checkpoints/best.pt (chosen on "
        "the run's own evaluation episodes, none of them the 20 test episodes). The requirement: "
        "the committed config (its final policy, or the one it keeps) at the target on at least "
        "that share of the evaluation seeds. Wall time is the mean over the seeds, beside other "
        "work unless a note says otherwise.",
        "",
        "| config | steps | contender | seeds | IQM [95% CI] | median | worst (seed) | "
        "at the target | the config's requirement | each seed | wall time |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | --- | --- | --- | ---: |",
        *rows,
        "",
        *notes,
        *([""] if notes else []),
        *(
            [
                "The training return (stochastic actions) of our contenders: the IQM over seeds, "
                "shaded its 95% bootstrap interval (`python -m scripts.bench.recurrent --plot`).",
                "",
            ]
            if curves
            else []
        ),
        *(line for image in curves for line in (image, "")),
    ]
