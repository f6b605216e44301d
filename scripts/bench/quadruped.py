"""Quadruped runs into records and curves: `targets` trains seeds of a legged config and times
them to the targets, `record` collects runs of the legged configs into one JSON for docs/bench,
`curve` draws their learning curves.

    python -m scripts.bench.quadruped targets --config configs/quadruped_flat.yaml \\
        --seeds 100 101 102 103 104 --runs runs/targets_flat
    python -m scripts.bench.quadruped record --out docs/bench/quadruped_flat.json \\
        --run seed0=runs/flat_s0 --run seed1=runs/flat_s1 \\
        --eval seed0:main=runs/flat_s0/eval.json --note "..."
    python -m scripts.bench.quadruped curve runs/quadruped_flat --out docs/images/quadruped_curve.png

`targets` (scripts/bench/lib/legged.py, report/legged.py): one seed after another, each run
alone as a user runs it (`embodied-ppo train CONFIG trainer.seed=S`, the config as committed,
`--set` run settings aside), watched while it trains: its time to target, in env steps and in
wall seconds from the command (start-up and compilation included), is its first periodic
evaluation from which every evaluation meets the targets (flat: <= 0.15 m/s, <= 0.2 rad/s, no
falls). Then `embodied-ppo eval RUN --episodes 20 --seed 1000` with the robustness sweep of
docs/legged.md (rough ground: from terrain levels 4 and 9). The record
(docs/bench/quadruped_<flat|rough>_targets.json) holds each seed's time to target, its
evaluations, its final evaluation and sweep, the IQM over seeds and the provenance; the block
of docs/legged.md between its markers is written from it (`targets --page-only` writes the
block again from the record alone; `--block NAME` picks another block than the config's kind).
`targets --add` trains seeds a record lacks and writes it again over all of its seeds (same
config, settings and evaluation; the earlier invocations are kept under "earlier").

`record` keeps, per run: its config overrides, wall time, steps, its learning curve (training
and periodic-evaluation metrics, every `--every`-th iteration and every iteration with a
periodic evaluation), with `--window FROM TO` each training metric's mean over every
iteration in that range of steps, its eval.json files (their per-episode logs dropped), and the
record's provenance (the collecting command, commit, date, machine; each run trained before
it, on the machine the note names).

`curve` draws the periodic deterministic evaluation's velocity tracking errors, fall rate and
return against environment steps (the training episodes' values, as a moving average, faint
behind them), a terrain-level panel where a run has one, and prints each run's training time.

A run that was stopped and resumed continues from its checkpoint's step with a clock that
starts again at 0: its time is the sum of the stretches (lib/runs.py, `stitched`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import legged, proc, records
from scripts.bench.lib.runs import collect, curve, run_settings, stitched
from scripts.bench.report import legged as legged_page

MODULE = "scripts.bench.quadruped"
PANELS = [
    ("metrics/tracking_error_lin", "linear velocity error (m/s)"),
    ("metrics/tracking_error_yaw", "yaw rate error (rad/s)"),
    ("metrics/fall_rate", "episodes ending in a fall"),
    ("episodic_return", "return"),
]


def record(args, argv: list[str]) -> None:
    """Collect the runs and their evaluations into one record."""
    runs: dict[str, Path] = {}
    for item in args.run:
        name, eq, path = item.partition("=")
        if not eq or not (Path(path) / "metrics.jsonl").is_file():
            raise cli_args.BadInput(f"--run {item}: expected NAME=RUN_DIR of a run")
        runs[name] = Path(path)
    evals: dict[tuple[str, str], Path] = {}
    for item in args.eval:
        key, eq, path = item.partition("=")
        name, _, label = key.partition(":")
        if not eq or name not in runs or not Path(path).is_file():
            raise cli_args.BadInput(f"--eval {item}: expected NAME:LABEL=EVAL_JSON of a --run")
        evals[(name, label)] = Path(path)
    window = None if args.window is None else (args.window[0], args.window[1])
    if window is not None and not 0 <= window[0] < window[1]:
        raise cli_args.BadInput(f"--window {window[0]} {window[1]}: expected 0 <= FROM < TO")
    out = {"note": args.note, "runs": collect(runs, evals, args.every, window),
           "provenance": records.provenance(MODULE, argv)}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


def draw(args) -> None:
    """The learning curves of the runs into one PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    for run in args.runs:
        if not (run / "metrics.jsonl").is_file():
            raise cli_args.BadInput(f"{run}: no metrics.jsonl")
    read = [stitched(run) for run in args.runs]
    panels = list(PANELS)
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


def train_to_targets(args, seed: int, run: Path) -> dict[str, Any]:
    """Train one seed alone, watched; its time to target, final evaluation and curve."""
    config = yaml_config(args.config)
    rough = "Rough" in config["env"]["id"]
    cmd = [sys.executable, "-m", "embodied_ppo", "train", str(Path(args.config).resolve()),
           f"trainer.seed={seed}", f"trainer.run_dir={run.resolve()}", *args.set]  # fmt: skip
    arrivals = legged.watch(cmd, run, proc.ROOT)
    rows = legged.read_rows(run)
    reached = legged.time_to_target(rows, arrivals, legged.ROUGH if rough else legged.FLAT)
    sweeps = [legged.ROUGH_LEVELS] if rough else list(legged.SWEEP)
    proc.cli(["eval", str(run), "--episodes", str(args.episodes), "--seed", str(args.eval_seed),
              *[x for sweep in sweeps for x in ("--sweep", sweep)]])  # fmt: skip
    final = json.loads((run / "eval.json").read_text())
    final.pop("episode_logs", None)
    points, summary = curve(run, args.every)
    wall = arrivals[-1] if arrivals else None
    return {"seed": seed, "run_dir": str(run), **summary, "command_wall_s": wall,
            "target": reached, "final": final, "curve": points}  # fmt: skip


def _relative(path: Path) -> str:
    """`path` from the repository's root where it lies inside it."""
    try:
        return str(path.resolve().relative_to(proc.ROOT))
    except ValueError:
        return str(path)


def yaml_config(path: str) -> dict:
    """A config file's mapping."""
    import yaml

    return yaml.safe_load(Path(path).read_text())


def targets(args, argv: list[str]) -> None:
    """Train the seeds one after another, evaluate them, write the record and the page block."""
    out = args.out or records.BENCH / f"quadruped_{args.kind}_targets.json"
    if args.page_only:
        if not out.is_file():
            raise cli_args.BadInput(f"--page-only: no record {out} to write the page from")
        legged_page.write_block(args.page, args.block or args.kind, json.loads(out.read_text()))
        return
    results = records.read_results(out, name=MODULE)  # refused before a run if not ours
    earlier = _earlier(args, results, out) if args.add else {}
    runs_dir = Path(args.runs)
    for seed in args.seeds:  # before anything trains
        if (runs_dir / f"seed{seed}").exists():
            raise cli_args.BadInput(
                f"{runs_dir / f'seed{seed}'} exists: give --runs a folder of no earlier runs"
            )
    runs_dir.mkdir(parents=True, exist_ok=True)
    seeds = dict(earlier.get("seeds", {}))
    for seed in args.seeds:
        run = runs_dir / f"seed{seed}"
        seeds[str(seed)] = train_to_targets(args, seed, run)
        print(legged_page.seed_line(seeds[str(seed)]), flush=True)
    results = {
        "config": args.config, "kind": args.kind, "settings": list(args.set),
        "episodes": args.episodes, "eval_seed": args.eval_seed, "seeds": seeds,
        "summary": legged_page.summarize(seeds, args.kind), "record": _relative(out),
        "provenance": records.provenance(MODULE, argv),
    }  # fmt: skip
    if earlier:  # the invocations that trained the record's other seeds, oldest first
        results["earlier"] = [*earlier.get("earlier", []), earlier["provenance"]]
    records.write_results(out, results)
    print("\n".join(legged_page.summary_lines(results)))
    print(f"wrote {out}")
    legged_page.write_block(args.page, args.block or args.kind, results)


def _earlier(args, results: dict, out: Path) -> dict:
    """`--add`: the record the seeds are added to, refused unless it is a record of the same
    config, settings and evaluation and holds none of the seeds."""
    if not results:
        raise cli_args.BadInput(f"--add: no record {out} to add seeds to")
    same = {"config": args.config, "settings": list(args.set), "episodes": args.episodes,
            "eval_seed": args.eval_seed}  # fmt: skip
    for key, value in same.items():
        if results.get(key) != value:
            raise cli_args.BadInput(
                f"--add: {out} has {key} {results.get(key)!r}, this invocation {value!r}"
            )
    twice = sorted(set(map(str, args.seeds)) & set(results["seeds"]))
    if twice:
        raise cli_args.BadInput(f"--add: seed {twice[0]} is already in {out}")
    return results


def build_parser() -> cli_args.Parser:
    """The command line: its three subcommands."""
    p = cli_args.parser(MODULE, __doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=cli_args.Parser)
    tgt = sub.add_parser("targets", help="train seeds, time them to the targets, evaluate")
    tgt.add_argument("--config", default="configs/quadruped_flat.yaml")
    tgt.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    tgt.add_argument("--runs", default="runs/targets", help="a folder for the runs")
    tgt.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="run settings of every run (scripts/bench/lib/runs.py)")  # fmt: skip
    tgt.add_argument("--episodes", type=int, default=20, help="final evaluation's episodes")
    tgt.add_argument("--eval-seed", type=int, default=1000)
    tgt.add_argument("--every", type=int, default=20, help="keep every n-th curve row")
    tgt.add_argument("--out", type=Path, default=None,
                     help="the record (default docs/bench/quadruped_<flat|rough>_targets.json)")  # fmt: skip
    tgt.add_argument("--page", type=Path, default=proc.ROOT / "docs" / "legged.md")
    tgt.add_argument("--page-only", action="store_true", help="write the page from the record")
    tgt.add_argument(
        "--block",
        default=None,
        help="the page's block to write (default: the config's kind, flat or rough)",
    )
    tgt.add_argument("--add", action="store_true",
                     help="add the seeds to the record at --out (same config and settings)")  # fmt: skip
    rec = sub.add_parser("record", help="collect runs into one JSON record")
    rec.add_argument("--out", required=True)
    rec.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR")
    rec.add_argument("--eval", action="append", default=[], metavar="NAME:LABEL=EVAL_JSON")
    rec.add_argument("--every", type=int, default=20)
    rec.add_argument(
        "--window",
        type=int,
        nargs=2,
        default=None,
        metavar=("FROM", "TO"),
        help="also each training metric's mean over every row in [FROM, TO) steps",
    )
    rec.add_argument("--note", default="")
    cur = sub.add_parser("curve", help="draw the runs' learning curves")
    cur.add_argument("runs", nargs="+", type=Path, help="run directories")
    cur.add_argument("--label", action="append", default=[], help="a name per run (default: dir)")
    cur.add_argument("--out", default="quadruped_curve.png")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if args.command == "targets":
            if args.episodes < 1 or args.every < 1:
                raise cli_args.BadInput("--episodes and --every must be at least 1")
            run_settings(args.set)
            if not Path(args.config).is_file():
                raise cli_args.BadInput(f"--config {args.config}: no such file")
            env_id = yaml_config(args.config).get("env", {}).get("id", "")
            if "Quadruped" not in str(env_id):
                raise cli_args.BadInput(f"--config {args.config}: not a quadruped config")
            args.kind = "rough" if "Rough" in env_id else "flat"
            targets(args, argv)
        elif args.command == "record":
            if not args.run:
                raise cli_args.BadInput("record: at least one --run NAME=RUN_DIR")
            if args.every < 1:
                raise cli_args.BadInput("--every must be at least 1")
            record(args, argv)
        else:
            draw(args)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
