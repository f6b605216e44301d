"""The arm tasks over seeds: configs/reach.yaml, push.yaml and reach_pixels.yaml, each seed
trained to its config's budget and its final policy's success rate measured.

For each task and seed, `embodied-ppo train CONFIG trainer.seed=S` trains in its own process
under ROOT/<task>/seed<S> (an interrupted run resumes from its last checkpoint, exact); the final
policy is evaluated deterministically on 100 episodes (`embodied-ppo eval --episodes 100
--seed 10000`). Every finished seed is saved at once in the results file (docs/bench/arm.json by
default) with its success rate, return, wall time and training curve, and is not run again
(invocations side by side, one core each, share the file: each keeps the seeds the others saved). The
table gives, per task and set of seeds (evaluation seeds 100 and up, tuning seeds below;
benchstats.py): the interquartile mean of the success rates with its 95% bootstrap interval, the
median, the worst seed and the seeds at the task's target; --plot draws the IQM band of the
training return (docs/images/arm_<task>_<set>_iqm.png).

    python scripts/bench_arm.py --tasks reach push --seeds 100 101 102 103 104
    python scripts/bench_arm.py --tasks reach_pixels --seeds 100 101 102
    python scripts/bench_arm.py --tasks reach --seeds 100 101 --set trainer.torch_threads=1
    python scripts/bench_arm.py --summarize --plot      # the table (and curves) of the results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import benchstats
from benchmark_mujoco import RUN_SETTINGS, cli, run_settings, training_curve

ROOT = Path(__file__).resolve().parents[1]
EVAL_SEED = 10000
EPISODES = 100
# The success rate at which a seed counts as having learned the task.
TARGETS = {"reach": 0.95, "push": 0.70, "reach_pixels": 0.80}
# What a config must show on evaluation seeds: at least k of n seeds at the target.
REQUIRED = {"reach": (5, 5), "push": (4, 5), "reach_pixels": (2, 3)}
DEFAULT_RESULTS = ROOT / "docs" / "bench" / "arm.json"
DEFAULT_ROOT = ROOT / "runs" / "bench_arm"


def run_seed(task: str, seed: int, run: Path, settings: Sequence[str] = ()) -> dict:
    """Train (or resume) one seed of a task with the run `settings` (benchmark_mujoco's
    RUN_SETTINGS overrides) and evaluate its final policy; its record."""
    start = time.perf_counter()
    if (run / "checkpoints" / "latest.pt").exists():
        cli(["train", "--resume", str(run), *settings])
    else:
        cli(["train", f"configs/{task}.yaml", f"trainer.seed={seed}", f"trainer.run_dir={run}",
             *settings])  # fmt: skip
    wall = time.perf_counter() - start
    out = run / "bench_arm_eval.json"
    cli(["eval", str(run), "--episodes", str(EPISODES), "--seed", str(EVAL_SEED),
         "--json", str(out)])  # fmt: skip
    summary = json.loads(out.read_text())
    return {
        "success_rate": summary["success_rate"],
        "mean_return": summary["mean_return"],
        "wall_s": wall,  # this invocation's (an earlier interrupted one's time is not counted)
        "curve": training_curve(run),
        **({"settings": list(settings)} if settings else {}),
    }


def save_seed(results_file: Path, task: str, seed: int, record: dict) -> dict:
    """Write one finished seed into the results file, keeping the seeds other invocations
    (running at the same time, on other seeds or tasks) wrote since this one started; the
    file as written."""
    results = benchstats.read_results(results_file)
    results.setdefault(task, {})[str(seed)] = record
    benchstats.write_results(results_file, results)
    return results


def summary_lines(results: dict) -> list[str]:
    """Per task and set of seeds: the statistics of the final success rates (benchstats.py)."""
    lines = [
        f"Final success rate over {EPISODES} deterministic episodes (eval --seed {EVAL_SEED}); "
        f"IQM [95% bootstrap CI, {benchstats.RESAMPLES:,} resamples]",
        "task | seeds | IQM [95% CI] | median | worst (seed) | at target | mean wall time",
    ]
    for task, per_seed in results.items():
        for group, runs in benchstats.by_group(per_seed).items():
            rates = {s: r["success_rate"] for s, r in runs.items()}
            cell = benchstats.cells(benchstats.summarize(rates, TARGETS.get(task)), ".2f")
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            lines.append(
                f"{task} (target {TARGETS.get(task, '-')}) | {group} {cell['seeds']} | "
                f"{cell['iqm']} | {cell['median']} | {cell['worst']} | {cell['at_target']} | "
                f"{wall / 60:.1f} min"
            )
    return lines


def requirement(task: str, summary: benchstats.Summary) -> str:
    """Against REQUIRED on evaluation seeds: 'met', '**missed**', or how many seeds are yet to
    run while the outcome is open."""
    need, of = REQUIRED[task]
    at, ran = len(summary.at_target), len(summary.values)
    if at >= need:
        return f"{need} of {of}: met"
    if need - at > of - ran:  # even the seeds not yet run could not make it up
        return f"{need} of {of}: **missed**"
    left = of - ran
    return f"{need} of {of}: open ({left} seed{'' if left == 1 else 's'} to run)"


def report_lines(results: dict, images: Path) -> list[str]:
    """The arm tasks' section of docs/benchmarks.md: per task and set of seeds, the statistics
    of the success rates and, on evaluation seeds, the requirement; the IQM bands drawn into
    `images` and linked."""
    rows, bands = [], []
    for task, per_seed in results.items():
        for group, runs in benchstats.by_group(per_seed).items():
            rates = {s: r["success_rate"] for s, r in runs.items()}
            summary = benchstats.summarize(rates, TARGETS.get(task))
            cell = benchstats.cells(summary, ".2f")
            wall = statistics.mean(r["wall_s"] for r in runs.values())
            held = requirement(task, summary) if group == "evaluation" else "-"
            rows.append(
                f"| `configs/{task}.yaml` | {group} {cell['seeds']} | {cell['iqm']} | "
                f"{cell['median']} | {cell['worst']} | >= {TARGETS[task]:.2f}: "
                f"{cell['at_target']} | {held} | {', '.join(f'{v:.2f}' for v in rates.values())} "
                f"| {wall / 60:.1f} min |"
            )
    measured = [t for t, runs in results.items() if "evaluation" in benchstats.by_group(runs)]
    pending = [f"`configs/{t}.yaml`" for t in TARGETS if t not in measured]
    for out in plot(results, images):
        task, group = out.stem.removeprefix("arm_").removesuffix("_iqm").rsplit("_", 1)
        bands += [f"![{task}, {group} seeds](images/{out.name})", ""]
    if not rows:
        return []
    return [
        "## Arm tasks (`scripts/bench_arm.py`)",
        "",
        f"From docs/bench/arm.json (`python scripts/bench_arm.py --summarize` prints the same). "
        f"Each seed: its final policy's success rate over {EPISODES} deterministic episodes "
        f"(`embodied-ppo eval --episodes {EPISODES} --seed {EVAL_SEED}`) after the config's "
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


def plot(results: dict, images: Path) -> list[Path]:
    """Per task and set of seeds with every seed's curve (two at least), the IQM band of the
    training return into images/arm_<task>_<set>_iqm.png; the images written."""
    written = []
    for task, per_seed in results.items():
        for group, runs in benchstats.by_group(per_seed).items():
            curves = {s: ([r[0] for r in x["curve"]], [r[1] for r in x["curve"]])
                      for s, x in runs.items() if x.get("curve")}  # fmt: skip
            if len(curves) > 1 and len(curves) == len(runs):
                label = f"{task}, {group} seeds {benchstats.seeds_text(list(runs))}"
                out = images / f"arm_{task}_{group}_iqm.png"
                benchstats.plot_bands({group: benchstats.curve_band(curves)}, out, label)
                written.append(out)
    return written


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tasks", nargs="+", choices=sorted(TARGETS), default=[])
    p.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102, 103, 104])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    p.add_argument("--summarize", action="store_true", help="the table of the results only")
    p.add_argument("--plot", action="store_true", help="draw the IQM bands into docs/images")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"a run setting for every run: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    args = p.parse_args()
    settings = run_settings(args.set)
    results = benchstats.read_results(args.results)
    if any(task not in TARGETS or not isinstance(seeds, dict) for task, seeds in results.items()):
        p.error(f"{args.results} is not a results file of this script")
    if not args.summarize:
        if not args.tasks:
            p.error("--tasks is required (or --summarize)")
        for task in args.tasks:
            for seed in args.seeds:
                if str(seed) in results.get(task, {}):
                    continue  # finished by an earlier invocation
                r = run_seed(task, seed, args.root.resolve() / task / f"seed{seed}", settings)
                results = save_seed(args.results, task, seed, r)
                print(f"{task} seed {seed}: success {r['success_rate']:.2f}", flush=True)
    if not results:
        print(f"bench_arm.py: error: no results in {args.results}", file=sys.stderr)
        sys.exit(2)
    print("\n".join(summary_lines(results)))
    if args.plot:
        for out in plot(results, ROOT / "docs" / "images"):
            print(f"wrote {out}")


if __name__ == "__main__":
    main()
