"""Learning curves of quadruped runs from their metrics.jsonl: the periodic deterministic
evaluation's velocity tracking errors, fall rate and return against environment steps (the
training episodes' values, as a moving average, faint behind them), and each run's training
time.

    python scripts/quadruped_curve.py runs/quadruped_flat --out docs/images/quadruped_curve.png

A run that was stopped and resumed continues from its checkpoint's step with a clock that
starts again at 0: its time is the sum of the stretches (the steps logged after the last
checkpoint before a stop were done again, and their time is not counted).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_run(run: Path) -> tuple[list[dict], float]:
    """The rows of one run (resumes stitched) and its training time in seconds."""
    rows: list[dict] = []
    offset = 0.0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if rows and row["global_step"] <= rows[-1]["global_step"]:  # replayed steps
            rows = [r for r in rows if r["global_step"] < row["global_step"]]
        if rows and row.get("time", 0.0) + offset < rows[-1]["wall"]:  # the clock restarted
            offset = rows[-1]["wall"]
        row["wall"] = offset + row.get("time", 0.0)
        rows.append(row)
    return rows, rows[-1]["wall"] if rows else 0.0


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.add_argument("--label", action="append", default=[], help="a name per run (default: dir)")
    p.add_argument("--out", default="quadruped_curve.png")
    args = p.parse_args()
    panels = [
        ("metrics/tracking_error_lin", "linear velocity error (m/s)"),
        ("metrics/tracking_error_yaw", "yaw rate error (rad/s)"),
        ("metrics/fall_rate", "episodes ending in a fall"),
        ("episodic_return", "return"),
    ]
    read = [read_run(run) for run in args.runs]
    if any("metrics/terrain_level" in r for rows, _ in read for r in rows):  # rough ground
        panels.append(("metrics/terrain_level", "terrain level (curriculum)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for i, (run, (rows, seconds)) in enumerate(zip(args.runs, read, strict=True)):
        name = args.label[i] if i < len(args.label) else run.name
        label = f"{name} ({rows[-1]['global_step'] / 1e6:.1f}M steps, {seconds / 60:.0f} min)"
        for ax, (key, title) in zip(axes, panels, strict=True):
            train_key = f"charts/{key}" if key == "episodic_return" else key
            train = [(r["global_step"] / 1e6, r[train_key]) for r in rows if train_key in r]
            evals = [(r["global_step"] / 1e6, r[f"eval/{key}"]) for r in rows if f"eval/{key}" in r]
            if train:  # a moving average over 50 logged iterations
                steps, values = zip(*train)
                smooth = [
                    sum(values[max(0, k - 49) : k + 1]) / min(k + 1, 50) for k in range(len(values))
                ]
                ax.plot(steps, smooth, color=f"C{i}", alpha=0.3, linewidth=0.8)
            if evals:
                ax.plot(*zip(*evals), color=f"C{i}", marker=".", label=label)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("environment steps (millions)")
            ax.grid(alpha=0.3)
        print(f"{name}: {rows[-1]['global_step']:,} steps in {seconds / 60:.1f} min")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "deterministic evaluation (points) and training episodes (faint, moving average)",
        fontsize=10,
    )
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
