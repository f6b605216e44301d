"""Compare the two runs of scripts/bench/mjlab_learning.sh (or of a window of
scripts/bench/mjlab_relay.sh): this package and rsl_rl on mjlab's Go1.

    python -m scripts.bench.mjlab_learning OUT_DIR [--plot PATH]

Reads OUT_DIR/ours/metrics.jsonl and OUT_DIR/rsl_rl/events.out.tfevents.* (every events file
there: a relayed rsl_rl run writes one per window) and prints, for both runs at a few
iterations, mjlab's own episode log (the same code computes it for both, averaged over the
episodes that ended in the iteration): the linear and angular velocity tracking rewards (an
episode's sum per second of the 20 s episode: 2.0 is perfect tracking for a whole episode),
mjlab's tracking-error metrics (each step's error over the steps of its longest command period,
summed over the episode: compare them between runs, not with a velocity) and the falls: the
share of the ended episodes that ended by a fall, computed the same way on both sides from
mjlab's termination log (its `fell_over` over the sum of its termination terms; rsl_rl averages
mjlab's per-reset counts and this package their shares of the ended episodes, and the ratio is
the same for both); then each run's own episode return and length (ours: the episodes ended in
the iteration; rsl_rl: its last 100 episodes) and the training loop's time (ours:
metrics.jsonl's `time`; rsl_rl: the sum of its collection and learning times), and the mean
iteration time over the second half of the iterations. Where OUT_DIR holds probe_ours.json and
probe_rsl_rl.json (scripts.bench.mjlab_probe), the velocity each policy achieved against the one
commanded is printed beside. --plot draws the tracking rewards and the episode length against
env steps.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.args import BadInput

# mjlab's episode log (identical keys on both sides) and each run's own names for the rest.
TRACK = "Episode_Reward/track_linear_velocity"
ERR_XY = "Metrics/twist/error_vel_xy"
ERR_YAW = "Metrics/twist/error_vel_yaw"
FELL = "Episode_Termination/fell_over"
TRACK_YAW = "Episode_Reward/track_angular_velocity"
TERMINATIONS = "Episode_Termination/"
FALLS = "falls (of ends)"
COLUMNS = {  # column -> (ours' key, rsl_rl's tag)
    "track_lin (of 2)": (TRACK, TRACK),
    "track_yaw (of 2)": (TRACK_YAW, TRACK_YAW),
    "err_xy": (ERR_XY, ERR_XY),
    "err_yaw": (ERR_YAW, ERR_YAW),
    FALLS: (FELL, FELL),  # as a share of all ends: see falls()
    "return": ("charts/episodic_return", "Train/mean_reward"),
    "ep length": ("charts/episodic_length", "Train/mean_episode_length"),
}


def falls(fell: float, terms: list[float]) -> float | None:
    """The share of ended episodes that fell: mjlab's fall term over the sum of its termination
    terms (means of counts per reset, or shares of the ends: the ratio is the same)."""
    total = sum(terms)
    return fell / total if total > 0 else None


def ours(path: Path) -> dict[int, dict[str, float]]:
    """Iteration (from 1) -> {column: value, "steps", "time"} from metrics.jsonl."""
    rows: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        got = {col: row[key] for col, (key, _) in COLUMNS.items() if key in row}
        ends = [v for k, v in row.items() if k.startswith(TERMINATIONS)]
        if FELL in row and falls(row[FELL], ends) is not None:
            got[FALLS] = falls(row[FELL], ends)
        got.update(steps=row["global_step"], time=row["time"])
        rows[int(row["iteration"])] = got
    return rows


def rsl_rl(directory: Path, envs: int) -> dict[int, dict[str, float]]:
    """Iteration (from 1) -> {column: value, "steps", "time"} from rsl_rl's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(glob.glob(str(directory / "events.out.tfevents.*")))
    if not files:
        raise BadInput(f"no TensorBoard events in {directory}")
    scalars: dict[str, dict[int, float]] = {}
    for path in files:  # a relayed run: one file a window, iterations numbered on
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})

    def series(tag: str) -> dict[int, float]:
        return scalars.get(tag, {})

    collect, learn = series("Perf/collection_time"), series("Perf/learning_time")
    rows: dict[int, dict[str, float]] = {}
    elapsed = 0.0
    for it in sorted(collect):
        elapsed += collect[it] + learn.get(it, 0.0)
        rows[it + 1] = {"steps": (it + 1) * 24 * envs, "time": elapsed}
    for col, (_, tag) in COLUMNS.items():
        for it, value in series(tag).items():
            if it + 1 in rows:
                rows[it + 1][col] = value
    ends = [series(t) for t in scalars if t.startswith(TERMINATIONS)]
    for it, fell in series(FELL).items():
        share = falls(fell, [e[it] for e in ends if it in e])
        if it + 1 in rows and share is not None:
            rows[it + 1][FALLS] = share
    return rows


def probes(out_dir: Path) -> str | None:
    """The velocity each policy achieved against the one commanded, side by side (None where
    the probes were not run)."""
    runs = {}
    for name in ("ours", "rsl_rl"):
        path = out_dir / f"probe_{name}.json"
        if path.is_file():
            runs[name] = {tuple(r["command"]): r for r in json.loads(path.read_text())["rows"]}
    if not runs:
        return None
    lines = ["| command vx, vy, yaw | " + " | ".join(f"{n}: achieved vx, vy, yaw (falls)" for n in runs) + " |",
             "|---|" + "---|" * len(runs)]  # fmt: skip
    for command in sorted({c for rows in runs.values() for c in rows}):
        cells = []
        for rows in runs.values():
            r = rows.get(command)
            cells.append(
                "-"
                if r is None
                else ", ".join(f"{v:+.2f}" for v in r["achieved"]) + f" ({r['falls']})"
            )
        lines.append(f"| {', '.join(f'{v:+.2f}' for v in command)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(runs: dict[str, dict[int, dict[str, float]]], marks: list[int]) -> str:
    head = ["run", "iteration", "env steps", "loop time s", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in runs.items():
        for it in marks:
            if it not in rows:
                continue
            r = rows[it]
            cells = [name, str(it), f"{r['steps'] / 1e6:.1f}M", f"{r['time']:.0f}"]
            cells += [f"{r[c]:.3g}" if c in r else "-" for c in COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = ["track_lin (of 2)", "track_yaw (of 2)", "ep length"]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 3.4))
    for ax, col in zip(axes, cols, strict=True):
        for name, rows in runs.items():
            its = [it for it in sorted(rows) if col in rows[it]]
            ax.plot([rows[it]["steps"] / 1e6 for it in its], [rows[it][col] for it in its],
                    label=name)  # fmt: skip
        ax.set_xlabel("env steps (M)")
        ax.set_title(col)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Mjlab-Velocity-Flat-Unitree-Go1: this package and rsl_rl, same GPU")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def compare(args) -> None:
    """Read both runs, print the table and the iteration times, draw the plot."""
    metrics = args.out_dir / "ours" / "metrics.jsonl"
    if not metrics.is_file():
        raise BadInput(f"{metrics} not found (run scripts/bench/mjlab_learning.sh first)")
    runs = {"embodied-ppo": ours(metrics), "rsl_rl": rsl_rl(args.out_dir / "rsl_rl", args.envs)}
    for name in [n for n, rows in runs.items() if not rows]:
        print(f"{name}: no iteration logged yet")
        del runs[name]
    if not runs:
        raise BadInput(f"{args.out_dir}: neither run logged an iteration")
    last = min(max(rows) for rows in runs.values())
    marks = sorted({max(1, last * k // 4) for k in (1, 2, 3, 4)})
    print(table(runs, marks))
    for name, rows in runs.items():
        half = last // 2
        if half >= 1 and last in rows and half in rows:
            per = (rows[last]["time"] - rows[half]["time"]) / (last - half)
            print(f"{name}: {per:.3f} s an iteration over iterations {half + 1}-{last}")
    for name in runs:
        wall = args.out_dir / f"{'ours' if name == 'embodied-ppo' else 'rsl_rl'}.wall_s"
        if wall.is_file():
            print(f"{name}: process wall time {wall.read_text().strip()} s")
    probed = probes(args.out_dir)
    if probed is not None:
        print("commanded against achieved velocity (scripts.bench.mjlab_probe):")
        print(probed)
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")


def build_parser() -> cli_args.Parser:
    """The comparison's command line."""
    p = cli_args.parser("scripts.bench.mjlab_learning", __doc__)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--envs", type=int, default=4096, help="envs of both runs (default 4096)")
    p.add_argument("--plot", type=Path, help="write the curves to this PNG")
    return p


def main(argv: list[str] | None = None) -> int:
    """Compare the runs of OUT_DIR with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), compare, argv)


if __name__ == "__main__":
    raise SystemExit(main())
