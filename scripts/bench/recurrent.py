"""Memory on partially observed tasks: our recurrent PPO, the same config without memory, and
sb3-contrib's RecurrentPPO, side by side on the same machine.

For each task and seed, three contenders train for the same number of env steps, each in its own
process, one after the other:

    ours        embodied-ppo train configs/<task>_pomdp.yaml            (an LSTM)
    memoryless  the same config with model.recurrent=null                (an MLP: the control)
    sb3         sb3_contrib.RecurrentPPO, RL Baselines3 Zoo's ppo_lstm settings for the task
                (scripts.bench.workers.sb3_recurrent)

and, when asked for (--contenders), ours_best: the config trained with its own periodic
evaluation (trainer.eval_interval; ours trains without it), scored by the policy the run keeps
as checkpoints/best.pt (its best periodic evaluation, on episodes of its own seed, none of
them test episodes), its final policy's returns kept beside.

Each policy is evaluated deterministically on the same episodes (those of
`embodied-ppo eval --seed 10000`; the recurrent state reset at every episode start). The JSON holds
every number (our runs' training curves, and each run's provenance: command, commit, date,
machine); the table prints, per contender and set of seeds (evaluation seeds 100 and up, tuning
seeds below; lib/stats.py), the interquartile mean of the evaluation returns with its 95%
bootstrap interval, the median, the worst seed, the seeds at the task's target, and the mean
wall time of its process. With --out, every finished run is saved at once and a seed already
in the file is not run again, so an interrupted invocation continues where it stopped;
invocations side by side may share one --out (say ours in one, sb3 in another), each keeping
the runs the others saved. --summarize prints the table of a results file without running;
--plot draws, per set of seeds, the IQM band of the training return of each of our contenders
(docs/images/recurrent_<task>_<set>_iqm.png). `--set` gives our runs their share of a machine
that other runs share (one thread each: docs/performance.md), recorded with each seed; it takes
only settings that do not change what a run learns (lib/runs.py's RUN_SETTINGS).

    python -m scripts.bench.recurrent --task cartpole --out docs/bench/recurrent_cartpole.json
    python -m scripts.bench.recurrent --task pendulum --seeds 100 --contenders ours sb3
    python -m scripts.bench.recurrent --task pendulum --contenders ours \\
        --set trainer.torch_threads=1 env.threads=1
    python -m scripts.bench.recurrent --summarize docs/bench/recurrent_pendulum.json --plot
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.runs import RUN_SETTINGS, run_settings
from scripts.bench.lib.tasks import EVAL_SEED, MEMORY_TASKS
from scripts.bench.report import memory

MODULE = "scripts.bench.recurrent"
CONTENDERS = ("ours", "ours_best", "memoryless", "sb3")
TASKS = MEMORY_TASKS


def evaluate(policy: Path, episodes: int, out: Path) -> dict:
    """`embodied-ppo eval` of a run folder (its final policy) or a checkpoint file on the test
    episodes (`--seed 10000`); the summary it writes to `out`."""
    cmd = [sys.executable, "-m", "embodied_ppo", "eval", str(policy), "--episodes", str(episodes),
           "--seed", str(EVAL_SEED), "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_ours(
    task: dict, seed: int, steps: int, episodes: int, contender: str, work: Path,
    settings: Sequence[str] = (),
) -> dict:  # fmt: skip
    """Train and evaluate one of our runs (`contender`: ours, ours_best or memoryless) with the
    run `settings` (RUN_SETTINGS overrides). ours_best trains with the config's periodic
    evaluation and is scored by the policy the run keeps as checkpoints/best.pt; its record
    also holds the final policy's returns."""
    run = work / f"{contender}_{seed}"
    extra = {
        "ours": ["trainer.eval_interval=null"],
        "ours_best": [],  # the config's own periodic evaluation picks best.pt
        "memoryless": ["model.recurrent=null", "algorithm.sequence_length=null",
                       "trainer.eval_interval=null"],
    }[contender]  # fmt: skip
    cmd = [sys.executable, "-m", "embodied_ppo", "train", task["config"], *extra,
           f"trainer.seed={seed}", f"trainer.total_steps={steps}", f"trainer.run_dir={run}",
           *settings]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    summary = evaluate(run, episodes, run / "eval.json")
    curve = [
        [row["global_step"], round(float(row["charts/episodic_return"]), 2)]
        for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "charts/episodic_return" in row
    ]
    record = {"wall_s": wall, "returns": summary["returns"], "mean": summary["mean_return"],
              "curve": curve}  # fmt: skip
    if contender == "ours_best":
        kept = run / "checkpoints" / "best.pt"
        if not kept.is_file():
            raise SystemExit(
                f"{MODULE}: {run} kept no checkpoints/best.pt: its "
                f"{steps} steps ended before the config's first periodic evaluation"
            )
        best = evaluate(kept, episodes, run / "best_eval.json")
        record |= {"returns": best["returns"], "mean": best["mean_return"],
                   "best_step": best["global_step"], "final_returns": summary["returns"],
                   "final_mean": summary["mean_return"]}  # fmt: skip
    if settings:
        record["settings"] = list(settings)
    return record


def run_sb3(task: dict, seed: int, steps: int, episodes: int) -> dict:
    """sb3-contrib's RecurrentPPO on the task, trained and evaluated in a fresh process."""
    cmd = proc.worker_command("sb3_recurrent", "--env", task["env_id"], "--seed", str(seed),
                              "--steps", str(steps), "--episodes", str(episodes))  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return proc.last_json(out.stdout)


def save_run(out: Path, record: dict, contender: str, seed: int, run: dict) -> dict:
    """Write one finished run into the results file `out`, keeping the runs other invocations
    (side by side, on other seeds or contenders) wrote since this one started; the record as
    written. `record` is this invocation's, used while `out` does not exist yet."""
    written = records.read_results(out, name="memory benchmark") or record
    written["results"].setdefault(contender, {})[str(seed)] = run
    records.write_results(out, written)
    return written


def summarize(args) -> None:
    """--summarize: the table (and bands) of a results file."""
    if not args.summarize.is_file():
        raise cli_args.BadInput(f"{args.summarize} not found")
    record = records.read_results(args.summarize, name="memory benchmark")
    if not isinstance(record.get("results"), dict):
        raise cli_args.BadInput(f"{args.summarize} is not a results file of this memory benchmark")
    print("\n".join(memory.summary_lines(record)))
    if args.plot:
        for out in memory.plot(record, ROOT / "docs" / "images"):
            print(f"wrote {out}")


def start_record(args, steps: int) -> dict:
    """This invocation's record, or the one --out holds (refused if it is of another task,
    budget or episode count)."""
    record = {
        "task": args.task,
        "steps": steps,
        "episodes": args.episodes,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "results": {},
    }
    if args.out and args.out.exists():
        kept = records.read_results(args.out, name="memory benchmark")
        held = tuple(kept.get(key) for key in ("task", "steps", "episodes"))
        if None in held:
            raise cli_args.BadInput(f"{args.out} is not a results file of this memory benchmark")
        if held != (args.task, steps, args.episodes):
            raise cli_args.BadInput(f"{args.out} holds another task, budget or episode count")
        record = kept
    return record


def run(args, argv: list[str]) -> None:
    """Run what is missing, then print (and plot) the table."""
    settings = run_settings(args.set)
    if args.summarize:
        return summarize(args)
    if args.task is None:
        raise cli_args.BadInput("--task is required (or --summarize)")
    task = TASKS[args.task]
    steps = args.steps or task["steps"]
    if "ours_best" in args.contenders:
        from embodied_ppo.config.loading import load_config

        if not load_config(ROOT / task["config"]).trainer.eval_interval:
            raise cli_args.BadInput(
                f"--contenders ours_best: {task['config']} has no periodic evaluation "
                "(trainer.eval_interval), so its runs keep no best.pt"
            )
    record = start_record(args, steps)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name in args.contenders:
                if str(seed) in record["results"].get(name, {}):
                    continue  # finished by an earlier invocation
                prov = records.provenance(MODULE, argv)
                if name == "sb3":
                    r = run_sb3(task, seed, steps, args.episodes)
                else:
                    r = run_ours(task, seed, steps, args.episodes, name, Path(tmp), settings)
                r["provenance"] = prov
                print(f"{args.task} seed {seed} {name:>10}: return {r['mean']:8.1f} "
                      f"({r['wall_s']:.0f} s)", flush=True)  # fmt: skip
                if args.out:
                    record = save_run(args.out, record, name, seed, r)
                else:
                    record["results"].setdefault(name, {})[str(seed)] = r
    print()
    print("\n".join(memory.summary_lines(record)))
    if args.plot:
        for out in memory.plot(record, ROOT / "docs" / "images"):
            print(f"wrote {out}")


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--task", choices=sorted(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)))
    p.add_argument("--steps", type=int, default=None, help="default: the task's 100k")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--contenders", nargs="+", default=["ours", "memoryless", "sb3"],
                   choices=CONTENDERS)  # fmt: skip
    p.add_argument("--out", type=Path, default=None,
                   help="the results JSON: written after every run, its runs kept")  # fmt: skip
    p.add_argument("--summarize", type=Path, default=None,
                   help="print the table of this results JSON and exit")  # fmt: skip
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"a run setting for our runs: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    p.add_argument("--plot", action="store_true",
                   help="draw the IQM bands of our contenders' training returns into "
                   "docs/images")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_args.run_main(build_parser(), lambda args: run(args, argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
