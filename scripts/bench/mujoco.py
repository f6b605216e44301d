"""The MuJoCo benchmark: our configs over several seeds, and Stable-Baselines3 beside them.

For each config and seed, `embodied-ppo train CONFIG trainer.seed=S trainer.total_steps=STEPS`
trains in its own process under ROOT/<name>/seed<S>; each final policy is evaluated
deterministically (`embodied-ppo eval --episodes 10 --seed 10000`). Stable-Baselines3 PPO with
RL Baselines3 Zoo's hyperparameters for the task trains the same number of steps on the same
machine (ROOT/<name>/sb3_seed<S>; scripts.bench.workers.sb3_zoo) and is evaluated on the same
episodes. <name> is the config's name for the default budget of 1M steps, with the budget
appended for any other (`humanoid_10M`), so one ROOT and one report hold several budgets. The
classic-control configs (cartpole.yaml, pendulum.yaml, cartpole_grpo.yaml) are measured the
same way at their own budgets (`--steps 100000`: `cartpole_100k`), without Stable-Baselines3
(no zoo settings here for them: `--sb3-seeds` with no seeds). The report (docs/benchmarks.md
by default; scripts.bench.report.page) opens with the seed protocol (lib/stats.py: tuning
seeds 0-9, evaluation seeds 100 and up; a config's seeds below 100 and from 100 are reported
on separate rows) and gives, per config and set of seeds: the interquartile mean (IQM) of the
evaluation returns with its 95% bootstrap confidence interval, the median, the worst seed, the
seeds at the budget's target, every seed's value, wall time and steps/s, the steps and
training time at which the training return first reached each threshold, and the learning
curves: every seed's (`embodied-ppo plot`) and the IQM over seeds with its 95% band. A config
that keeps its best policy (`trainer.eval_interval`: checkpoints/best.pt, chosen on episodes
of the run's own seed) has that policy scored on the same test episodes too, in a row of its
own under the final policies' row.

Every invocation continues where the last one stopped: finished runs are kept, an interrupted
run of ours resumes from its last checkpoint (`train --resume`, exact), an interrupted
Stable-Baselines3 run from its last save (every `--sb3-save-every` steps). So long budgets can
be split over several invocations; the wall time of a run is the sum over its invocations.

The results (every seed's evaluation, wall time, threshold crossings, training curve and
provenance: command, commit, date, machine) are kept in a JSON file that outlives the runs:
docs/bench/mujoco.json, tracked with the report, for the default ROOT; ROOT/results.json for
any other ROOT (experiments), unless --results names one. So the report can be rewritten
(`--report-only`) on a clone that holds none of the runs: a learning curve is redrawn where
every seed's run folder is present and kept as it is otherwise. Each record keeps a digest of
its config's settings: a config changed since (comments aside) is refused, so runs of old
settings are never mixed with new ones. A record's "remarks" (a list of sentences, written
into the results file by hand) are printed under the table: how its runs were measured where
the report's own sentences do not say it (e.g. beside other work).

    python -m scripts.bench.mujoco --configs configs/hopper.yaml configs/walker2d.yaml \\
        --seeds 100 101 102 103 104 --steps 1000000 --sb3-seeds 100 101 102
    python -m scripts.bench.mujoco --configs configs/humanoid.yaml --seeds 100 \\
        --sb3-seeds --steps 10000000                    # recorded as humanoid_10M
    python -m scripts.bench.mujoco --report-only      # rewrite the report from ROOT

Runs that share the machine with other runs are given their share of it with `--set` (how
a run runs, not what it learns; each seed's record names the settings it ran with):

    python -m scripts.bench.mujoco --configs configs/ant.yaml --seeds 100 101 \\
        --set trainer.torch_threads=1 env.processes=1
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records
from scripts.bench.lib.proc import ROOT
from scripts.bench.lib.runs import RUN_SETTINGS, first_reached, run_settings, training_curve
from scripts.bench.lib.tasks import (
    DEFAULT_SB3_SEEDS,
    DEFAULT_SEEDS,
    DEFAULT_STEPS,
    EVAL_SEED,
    family,
    thresholds,
)
from scripts.bench.report import page
from scripts.bench.workers.sb3_zoo import SB3_ZOO

MODULE = "scripts.bench.mujoco"
DEFAULT_ROOT = ROOT / "runs" / "benchmark"
DEFAULT_RESULTS = records.BENCH / "mujoco.json"


def steps_label(steps: int) -> str:
    """10000000 -> '10M', 500000 -> '500k', 256 -> '256'."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if steps >= size and steps % size == 0:
            return f"{steps // size}{unit}"
    return str(steps)


def record_name(config: Path, steps: int) -> str:
    """A config's key in results.json and its folder under ROOT: the config's name, with the
    budget appended where it is not the default (so one ROOT holds several budgets)."""
    return config.stem if steps == DEFAULT_STEPS else f"{config.stem}_{steps_label(steps)}"


def env_id_of(config: Path) -> str:
    """The env id a config trains on."""
    import yaml

    return yaml.safe_load(config.read_text())["env"]["id"]


def config_digest(config: Path) -> str:
    """What a config trains, as a short hash of its settings. Its comments do not count, nor
    do the keys that change how a run runs but not what it learns (those a resume may change:
    env.threads, env.processes, trainer.torch_threads, ...)."""
    import yaml

    from embodied_ppo.config.resume import RESUMABLE_KEYS

    data = yaml.safe_load(config.read_text())
    for key in RESUMABLE_KEYS:
        block, _, name = key.partition(".")
        if isinstance(data.get(block), dict):
            data[block].pop(name, None)
    settings = json.dumps(data, sort_keys=True)
    return hashlib.sha256(settings.encode()).hexdigest()[:16]


def score(policy: Path, out: Path, episodes: int) -> dict:
    """`embodied-ppo eval` of a run (its final policy) or a checkpoint on the test episodes
    (`--seed 10000`), its JSON summary written to `out` and returned."""
    proc.cli(["eval", str(policy), "--episodes", str(episodes), "--seed", str(EVAL_SEED),
              "--json", str(out)])  # fmt: skip
    return json.loads(out.read_text())


def run_ours(
    config: Path, seed: int, steps: int, run: Path, episodes: int, settings: Sequence[str] = ()
) -> dict:
    """Train (or resume) one run of ours with the run `settings` (RUN_SETTINGS overrides),
    evaluate it; the run's record (which names the settings of each invocation that trained)."""
    state_file = run / "benchmark.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"wall_s": 0.0}
    if "eval" in state:
        return state
    latest = run / "checkpoints" / "latest.pt"
    if latest.exists():
        cmd = ["train", "--resume", str(run)]
    else:
        cmd = ["train", str(config), f"trainer.seed={seed}", f"trainer.total_steps={steps}",
               f"trainer.run_dir={run}"]  # fmt: skip
    cmd += settings
    if settings:
        state.setdefault("settings", []).append(list(settings))
    start = time.perf_counter()
    try:
        proc.cli(cmd)
    finally:  # an interrupted invocation's time still counts
        state["wall_s"] += time.perf_counter() - start
        run.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(state, indent=2) + "\n")
    summary = score(run, run / "benchmark_eval.json", episodes)
    state["eval"] = {"mean": summary["mean_return"], "std": summary["std_return"]}
    kept = run / "checkpoints" / "best.pt"
    if kept.is_file():  # a config with a periodic evaluation keeps its best policy: score it too
        best = score(kept, run / "benchmark_eval_kept.json", episodes)
        state["kept"] = {"mean": best["mean_return"], "std": best["std_return"],
                         "step": best["global_step"]}  # fmt: skip
    state["steps"] = steps
    state["reached"] = first_reached(run, thresholds(family(env_id_of(config))))
    state["curve"] = training_curve(run)
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    return state


def run_sb3(env_id: str, seed: int, steps: int, run: Path, save_every: int, episodes: int) -> dict:
    """Stable-Baselines3 with the zoo's settings on one seed (scripts.bench.workers.sb3_zoo,
    in a fresh process; it continues from its last save); the run's record."""
    state_file = run / "state.json"
    if state_file.exists() and "eval" in json.loads(state_file.read_text()):
        return json.loads(state_file.read_text())
    cmd = proc.worker_command("sb3_zoo", "--env", env_id, "--seed", str(seed), "--steps",
                              str(steps), "--run", str(run), "--save-every", str(save_every),
                              "--episodes", str(episodes))  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(state_file.read_text())


def save_record(results_file: Path, name: str, rec: dict) -> None:
    """Write one config's record into results.json, keeping the records other invocations
    (running at the same time, on other configs) wrote since this one started."""
    current = records.read_results(results_file, records="env_id", name="MuJoCo benchmark")
    current[name] = rec
    records.write_results(results_file, current)


def check_configs(args, results: dict, results_file: Path) -> None:
    """Refuse, before anything runs, a missing config, one changed since its recorded runs,
    or Stable-Baselines3 seeds for a task without zoo settings."""
    for config in args.configs:
        if not config.is_file():
            raise cli_args.BadInput(f"no such config: {config}")
        name = record_name(config, args.steps)
        known = results.get(name, {}).get("config_digest")
        if known is not None and known != config_digest(config):
            raise cli_args.BadInput(
                f"{config} changed since the runs recorded as {name!r} in {results_file}; "
                "remove that record (its runs are of the old settings) or use another --root"
            )
        if args.sb3_seeds and family(env_id_of(config)) not in SB3_ZOO:
            raise cli_args.BadInput(
                f"no RL Zoo settings here for {env_id_of(config)}: pass --sb3-seeds with no seeds"
            )


def run_config(args, config: Path, results: dict, results_file: Path, argv: list[str]) -> None:
    """Every missing seed of one config, ours then Stable-Baselines3, each saved when done."""
    root = args.root.resolve()
    name, env_id = record_name(config, args.steps), env_id_of(config)
    rec = results.setdefault(name, {"env_id": env_id, "steps": args.steps, "ours": {}, "sb3": {}})
    path = config.resolve()
    rec["config"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    rec["config_digest"] = config_digest(config)
    if rec["steps"] != args.steps:
        raise cli_args.BadInput(f"{root / name} holds runs of {rec['steps']:,} steps; "
                                "use another --root")  # fmt: skip
    settings = run_settings(args.set)
    for side, seeds in (("ours", args.seeds), ("sb3", args.sb3_seeds)):
        for seed in seeds:
            if "eval" in rec[side].get(str(seed), {}):  # finished, its folder maybe gone
                continue
            prov = records.provenance(MODULE, argv)
            if side == "ours":
                run = root / name / f"seed{seed}"
                r = run_ours(config, seed, args.steps, run, args.episodes, settings)
            else:
                r = run_sb3(env_id, seed, args.steps, root / name / f"sb3_seed{seed}",
                            args.sb3_save_every, args.episodes)  # fmt: skip
            rec[side][str(seed)] = {**r, "provenance": prov}
            save_record(results_file, name, rec)
            label = "" if side == "ours" else " SB3"
            print(f"{name}{label} seed {seed}: {r['eval']['mean']:.1f} "
                  f"({r['wall_s'] / 60:.1f} min)")  # fmt: skip


def run(args, argv: list[str]) -> None:
    """Run what is missing of the configs' seeds, then write the report."""
    run_settings(args.set)
    root = args.root.resolve()
    if args.results is not None:
        results_file = args.results.resolve()
    else:
        results_file = DEFAULT_RESULTS if root == DEFAULT_ROOT.resolve() else root / "results.json"
    results = records.read_results(results_file, records="env_id", name="MuJoCo benchmark")
    if not args.report_only:
        if not args.configs:
            raise cli_args.BadInput("--configs is required (or --report-only)")
        check_configs(args, results, results_file)
        root.mkdir(parents=True, exist_ok=True)
        for config in args.configs:
            run_config(args, config, results, results_file, argv)
        results = json.loads(results_file.read_text())  # with other invocations' records
    if not results:
        raise cli_args.BadInput(f"no results in {results_file}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    page.report(results, args.out.resolve(), root)
    print(f"wrote {args.out}")


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--configs", nargs="+", type=Path, default=[])
    p.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS)
    p.add_argument("--sb3-seeds", nargs="*", type=int, default=DEFAULT_SB3_SEEDS)
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--results", type=Path, default=None,
                   help="the results file (default: docs/bench/mujoco.json for the default "
                   "--root, ROOT/results.json otherwise)")  # fmt: skip
    p.add_argument("--sb3-save-every", type=int, default=100_000)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help=f"a run setting for every run of ours: {', '.join(RUN_SETTINGS)}")  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="rewrite the report from ROOT")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return cli_args.run_main(build_parser(), lambda args: run(args, argv), argv)


if __name__ == "__main__":
    raise SystemExit(main())
