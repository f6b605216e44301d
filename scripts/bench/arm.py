"""The arm tasks over seeds: configs/reach.yaml, push.yaml and reach_pixels.yaml, each seed
trained to its config's budget and its final policy's success rate measured.

For each task and seed, `embodied-ppo train CONFIG trainer.seed=S` trains in its own process
under ROOT/<task>/seed<S> (an interrupted run resumes from its last checkpoint, exact); the final
policy is evaluated deterministically on 100 episodes (`embodied-ppo eval --episodes 100
--seed 10000`). Every finished seed is saved at once in the results file (docs/bench/arm.json by
default) with its success rate, return, wall time, training curve and provenance (command,
commit, date, machine), and is not run again (invocations side by side, one core each, share the
file: each keeps the seeds the others saved). The table gives, per task and set of seeds
(evaluation seeds 100 and up, tuning seeds below; lib/stats.py): the interquartile mean of the
success rates with its 95% bootstrap interval, the median, the worst seed and the seeds at the
task's target; --plot draws the IQM band of the training return
(docs/images/arm_<task>_<set>_iqm.png).

    python -m scripts.bench.arm --tasks reach push --seeds 100 101 102 103 104
    python -m scripts.bench.arm --tasks reach_pixels --seeds 100 101 102
    python -m scripts.bench.arm --tasks reach --seeds 100 101 --set trainer.torch_threads=1
    python -m scripts.bench.arm --summarize --plot      # the table (and curves) of the results
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import records
from scripts.bench.lib.proc import ROOT, cli
from scripts.bench.lib.runs import RUN_SETTINGS, run_settings, training_curve
from scripts.bench.lib.tasks import ARM_EPISODES, ARM_TARGETS, EVAL_SEED
from scripts.bench.report import arm as arm_report

MODULE = "scripts.bench.arm"
DEFAULT_RESULTS = records.BENCH / "arm.json"
DEFAULT_ROOT = ROOT / "runs" / "bench_arm"


def run_seed(task: str, seed: int, run: Path, settings: Sequence[str] = ()) -> dict:
    """Train (or resume) one seed of a task with the run `settings` (lib/runs.py's
    RUN_SETTINGS overrides) and evaluate its final policy; its record."""
    start = time.perf_counter()
    if (run / "checkpoints" / "latest.pt").exists():
        cli(["train", "--resume", str(run), *settings])
    else:
        cli(["train", f"configs/{task}.yaml", f"trainer.seed={seed}", f"trainer.run_dir={run}",
             *settings])  # fmt: skip
    wall = time.perf_counter() - start
    out = run / "bench_arm_eval.json"
    cli(["eval", str(run), "--episodes", str(ARM_EPISODES), "--seed", str(EVAL_SEED),
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
    results = records.read_results(results_file, name="arm benchmark")
    results.setdefault(task, {})[str(seed)] = record
    records.write_results(results_file, results)
    return results


def run(args, argv: list[str]) -> None:
    """Train what is missing, then print (and plot) the table."""
    settings = run_settings(args.set)
    results = records.read_results(args.results, name="arm benchmark")
    if any(
        task not in ARM_TARGETS or not isinstance(seeds, dict) for task, seeds in results.items()
    ):
        raise cli_args.BadInput(f"{args.results} is not a results file of this arm benchmark")
    if not args.summarize:
        if not args.tasks:
            raise cli_args.BadInput("--tasks is required (or --summarize)")
        for task in args.tasks:
            for seed in args.seeds:
                if str(seed) in results.get(task, {}):
                    continue  # finished by an earlier invocation
                prov = records.provenance(MODULE, argv)
                r = run_seed(task, seed, args.root.resolve() / task / f"seed{seed}", settings)
                results = save_seed(args.results, task, seed, {**r, "provenance": prov})
                print(f"{task} seed {seed}: success {r['success_rate']:.2f}", flush=True)
    if not results:
        raise cli_args.BadInput(f"no results in {args.results}")
    print("\n".join(arm_report.summary_lines(results)))
    if args.plot:
        for out in arm_report.plot(results, ROOT / "docs" / "images"):
            print(f"wrote {out}")


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--tasks", nargs="+", choices=sorted(ARM_TARGETS), default=[])
    p.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102, 103, 104])
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    p.add_argument("--summarize", action="store_true", help="the table of the results only")
    p.add_argument("--plot", action="store_true", help="draw the IQM bands into docs/images")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"a run setting for every run: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_args.run_main(build_parser(), lambda args: run(args, argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
