"""Steady-state throughput side by side: the raw env, our collection, our training and
Stable-Baselines3 PPO's training, on the same settings.

Every contender runs in its own fresh process (so thread settings of one cannot leak into
another) and the contenders alternate round by round, so drift of the machine hits all of them
alike. The raw env and our collection share one process per round and alternate rollout by
rollout there, on the same envs (each rollout continues the episodes the other left): drift
within a round cancels, and so do differences of simulation cost between physical states. The
first iteration of each training contender (compilation, warm-up) is excluded. The table
reports the median steps/s over rounds and the ratios that matter:

    ours_train / sb3_train      full training, identical hyperparameters
    ours_collect / raw_env      how close collection gets to the simulator's own limit

Whole training processes, from start to exit, are timed by scripts.bench.whole_process.

Identical hyperparameters include the learning-rate schedule: with `early_stop_kl` the rate
decides how many gradient steps an update takes (a higher rate trips the stop sooner), so
Stable-Baselines3 gets the config's linear decay as a schedule of its own, at the rate ours
uses for the same iteration, and `target_kl` = early_stop_kl / 1.5 (it stops past 1.5 x
target_kl). A config with the KL-adaptive rate is refused: Stable-Baselines3 has none.

Threads: each contender gets its best setting by default, and the table says which. Ours
chooses its own (trainer.torch_threads: null). Stable-Baselines3 uses torch's default (every
core), which on a small machine makes its update's threads fight its env stepping; so before
the rounds both 1 thread and every core are tried for one iteration and the faster is kept
(`--sb3-threads N` fixes it instead).

    python -m scripts.bench.throughput --env HalfCheetah-v5 --num-envs 8
    python -m scripts.bench.throughput --config configs/humanoid.yaml --iterations 2
    python -m scripts.bench.throughput --config configs/humanoid.yaml --device cuda \\
        --only ours_train sb3_train --iterations 2 --rounds 1 --sb3-threads 1

`--json FILE` writes the record: the settings, the machine, every round's steps/s per
contender, their medians and ratios, and its provenance (command, commit, date, machine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import ppo_settings, proc, records, sidebyside

MODULE = "scripts.bench.throughput"
CONTENDERS = ("raw_env", "ours_collect", "ours_train", "sb3_train")
PAIRS = {
    "ours_train / sb3_train": ("ours_train", "sb3_train"),
    "ours_collect / raw_env": ("ours_collect", "raw_env"),
}


def measure(name: str, s: dict, iterations: int, threads: int | None) -> dict:
    """One contender's measurement (collect_pair: both of its contenders'), in a fresh process."""
    if name == "sb3_train":
        return sidebyside.sb3_steady(s, iterations, threads)
    cmd = proc.worker_command("throughput", "--contender", name, "--settings", json.dumps(s),
                              "--iterations", str(iterations))  # fmt: skip
    cmd += [] if threads is None else ["--threads", str(threads)]
    return proc.run_worker(name, cmd)


def run(args, argv: list[str]) -> None:
    """The rounds, the table, the record."""
    s = ppo_settings.from_config(args.config) if args.config else ppo_settings.from_args(args)
    s["device"] = args.device
    if "sb3_train" in args.only and s["schedule"] == "adaptive":
        raise cli_args.BadInput(
            "optim.schedule: adaptive has no Stable-Baselines3 counterpart; "
            "time it with --only raw_env ours_collect ours_train"
        )
    prov = records.provenance(MODULE, argv)
    sb3_threads, tried = args.sb3_threads, {}
    if sb3_threads is None and "sb3_train" in args.only:
        sb3_threads, tried = sidebyside.best_sb3_threads(s)
    print(sidebyside.threads_line(args.threads, sb3_threads, tried), flush=True)
    results: dict[str, list[float]] = {c: [] for c in args.only}
    workers = [c for c in args.only if c not in ("raw_env", "ours_collect")]
    if "raw_env" in args.only and "ours_collect" in args.only:
        workers.insert(0, "collect_pair")
    else:
        workers[:0] = [c for c in args.only if c in ("raw_env", "ours_collect")]
    for r in range(args.rounds):
        for c in workers:
            m = measure(c, s, args.iterations, sb3_threads if c == "sb3_train" else args.threads)
            for name, one in m.items() if c == "collect_pair" else [(c, m)]:
                results[name].append(one["steps"] / one["seconds"])
                print(
                    f"round {r + 1}/{args.rounds} {name:13s} {results[name][-1]:10,.0f} steps/s",
                    flush=True,
                )
    summary = sidebyside.ratios(results, PAIRS)
    info = records.torch_machine()
    print()
    print(
        f"{s['env']}: {s['num_envs']} env(s) x {s['rollout_steps']} steps, minibatch "
        f"{s['minibatch_size']}, {s['epochs']} epochs, {s['hidden']} {s['activation']} MLP; "
        f"{args.rounds} rounds x {args.iterations} iterations"
    )
    print(
        f"machine: {info['cores']} cores, torch {info['torch']} "
        f"({info['torch_threads_default']} threads default), cuda={info['cuda']}"
        + (f" ({info['gpu']}); learners on {s['device']}" if info["gpu"] else "")
    )
    print(f"{'contender':14s} {'steps/s (median)':>18s}")
    for c, v in summary["median"].items():
        print(f"{c:14s} {v:18,.0f}")
    print("\n".join(sidebyside.ratio_lines(summary)))
    if args.json:
        record: dict[str, Any] = {
            "settings": s,
            "machine": info,
            "threads": {"sb3_threads": sb3_threads, "tried": tried},
            "whole_process_steps": None,
            "results": results,
            **summary,
            "provenance": prov,
        }
        records.write_results(Path(args.json), record)


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument(
        "--rollout-steps", type=int, default=2048, help="transitions per iteration (all envs)"
    )
    p.add_argument("--minibatch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--backend", default="sync", choices=["sync", "async", "envpool"])
    p.add_argument(
        "--env-threads", type=int, default=1, help="threads stepping the envs (sync backend)"
    )
    p.add_argument("--env-processes", type=int, default=1,
                   help="processes stepping the envs, this one included (sync backend)")  # fmt: skip
    p.add_argument("--config", help="take every setting from this embodied-ppo config instead")
    p.add_argument(
        "--iterations", type=int, default=3, help="measured iterations per contender and round"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads for ours (default: its own)"
    )
    p.add_argument("--sb3-threads", type=int, default=None,
                   help="torch threads for SB3 (default: the faster of 1 and every core)")  # fmt: skip
    p.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    p.add_argument("--device", default="cpu",
                   help="where both learners' updates run: cpu (default) or cuda[:N]")  # fmt: skip
    p.add_argument("--json", default=None, help="write the record here")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if args.config and not Path(args.config).is_file():
            raise cli_args.BadInput(f"--config {args.config}: no such file")
        for name in ("iterations", "rounds"):
            if getattr(args, name) < 1:
                raise cli_args.BadInput(f"--{name} must be at least 1")
        run(args, argv)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
