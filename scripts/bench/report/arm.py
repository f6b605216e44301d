"""The arm tasks' statistics (scripts.bench.arm's results file, docs/bench/arm.json): the table it
prints, the section of docs/benchmarks.md and the IQM bands of the training return."""

from __future__ import annotations

import statistics
from pathlib import Path

from scripts.bench.lib import stats
from scripts.bench.lib.plots import plot_bands
from scripts.bench.lib.tasks import ARM_EPISODES, ARM_REQUIRED, ARM_TARGETS, EVAL_SEED


def summary_lines(results: dict) -> list[str]:
    """Per task and set of seeds: the statistics of the final success rates (lib/stats.py)."""
    lines = [
        f"Final success rate over {ARM_EPISODES} deterministic episodes (eval --seed "
        f"{EVAL_SEED}); IQM [95% bootstrap CI, {stats.RESAMPLES:,} resamples]",
        "task | seeds | IQM [95% CI] | median | worst (seed) | at target | mean wall time",
    ]
    for task, per_seed in results.items():
        for group, runs in stats.by_group(per_seed).items():
            rates = {s: r["success_rate"] for s, r in runs.items()}
            cell = stats.cells(stats.summarize(rates, ARM_TARGETS.get(task)), ".2f")
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            lines.append(
                f"{task} (target {ARM_TARGETS.get(task, '-')}) | {group} {cell['seeds']} | "
                f"{cell['iqm']} | {cell['median']} | {cell['worst']} | {cell['at_target']} | "
                f"{wall / 60:.1f} min"
            )
    return lines


def requirement(task: str, summary: stats.Summary) -> str:
    """Against ARM_REQUIRED on evaluation seeds: 'met', '**missed**', or how many seeds are yet
    to run while the outcome is open."""
    need, of = ARM_REQUIRED[task]
    at, ran = len(summary.at_target), len(summary.values)
    if at >= need:
        return f"{need} of {of}: met"
    if need - at > of - ran:  # even the seeds not yet run could not make it up
        return f"{need} of {of}: **missed**"
    left = of - ran
    return f"{need} of {of}: open ({left} seed{'' if left == 1 else 's'} to run)"


def report_lines(results: dict, images: Path, draw: bool = True) -> list[str]:
    """The arm tasks' section of docs/benchmarks.md: per task and set of seeds, the statistics
    of the success rates and, on evaluation seeds, the requirement; the IQM bands drawn into
    `images` (where `draw`; otherwise the images already there) and linked."""
    rows, bands = [], []
    for task, per_seed in results.items():
        for group, runs in stats.by_group(per_seed).items():
            rates = {s: r["success_rate"] for s, r in runs.items()}
            summary = stats.summarize(rates, ARM_TARGETS.get(task))
            cell = stats.cells(summary, ".2f")
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            held = requirement(task, summary) if group == "evaluation" else "-"
            rows.append(
                f"| `configs/{task}.yaml` | {group} {cell['seeds']} | {cell['iqm']} | "
                f"{cell['median']} | {cell['worst']} | >= {ARM_TARGETS[task]:.2f}: "
                f"{cell['at_target']} | {held} | {', '.join(f'{v:.2f}' for v in rates.values())} "
                f"| {wall / 60:.1f} min |"
            )
    measured = [t for t, runs in results.items() if "evaluation" in stats.by_group(runs)]
    pending = [f"`configs/{t}.yaml`" for t in ARM_TARGETS if t not in measured]
    for out in plot(results, images, draw):
        task, group = out.stem.removeprefix("arm_").removesuffix("_iqm").rsplit("_", 1)
        bands += [f"![{task}, {group} seeds](images/{out.name})", ""]
    if not rows:
        return []
    return [
        "## Arm tasks",
        "",
        f"From docs/bench/arm.json (`python -m scripts.bench.arm --summarize` prints the same). "
        f"Each seed: its final policy's success rate over {ARM_EPISODES} deterministic episodes "
        f"(`embodied-ppo eval --episodes {ARM_EPISODES} --seed {EVAL_SEED}`) after the config's "
        "budget. The requirement: at least k of n evaluation seeds at the target. Wall time is "
        "the mean over the seeds, one core each, two runs side by side.",
        "",
        "| config | seeds | IQM [95% CI] | median | worst (seed) | at the target | "
        "the config's requirement | each seed | wall time |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | --- | ---: |",
        *rows,
        "",
        *(
            [f"Not yet measured on evaluation seeds: {', '.join(pending)} (their tuning "
             "seeds' numbers: docs/tasks.md).", ""]
            if pending else []
        ),
        *(
            ["The training return: the IQM over seeds, shaded its 95% bootstrap interval.", ""]
            if bands else []
        ),
        *bands,
    ]  # fmt: skip


def plot(results: dict, images: Path, draw: bool = True) -> list[Path]:
    """Per task and set of seeds with every seed's curve (two at least), the IQM band of the
    training return into images/arm_<task>_<set>_iqm.png; the images written (where `draw`;
    otherwise those of them already there)."""
    written = []
    for task, per_seed in results.items():
        for group, runs in stats.by_group(per_seed).items():
            curves = {s: ([r[0] for r in x["curve"]], [r[1] for r in x["curve"]])
                      for s, x in runs.items() if x.get("curve")}  # fmt: skip
            if len(curves) > 1 and len(curves) == len(runs):
                out = images / f"arm_{task}_{group}_iqm.png"
                if draw:
                    label = f"{task}, {group} seeds {stats.seeds_text(list(runs))}"
                    plot_bands({group: stats.curve_band(curves)}, out, label)
                if draw or out.is_file():
                    written.append(out)
    return written
