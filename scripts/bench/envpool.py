"""Raw environment throughput of the env backends: envpool against sync (1 and 2 threads, or
split over 2 processes) and async.

Random actions (drawn before timing), no policy: env steps per second of `envs.step` through our
wrappers (`make_env`: what the collector sees, SAME_STEP resets and statistics included) and, for
reference, of the vector envs alone (envpool's `step` with its NEXT_STEP resets; our serial
vector env behind the sync backend). Every measurement runs in a fresh process
(scripts.bench.workers.envpool) and the contenders alternate round by round, so drift in the
machine's load hits all of them alike; the tables give medians over rounds (steps per
wall-clock second and per CPU second) and the 1-minute load average seen around each round.

    python -m scripts.bench.envpool --env Humanoid-v5 HalfCheetah-v5 --num-envs 8 --rounds 5
    python -m scripts.bench.envpool --env HalfCheetah-v5 --num-envs 64 --steps 300 --rounds 3 \\
        --contenders sync sync_threads sync_processes envpool

`--json FILE` writes the record: every round's rates per env and contender, the load averages,
and its provenance (command, commit, date, machine).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records
from scripts.bench.workers.envpool import CONTENDERS

MODULE = "scripts.bench.envpool"


def tables(args, rates: dict, cpu_rates: dict) -> list[str]:
    """The two Markdown tables: medians of steps/s with the envpool ratios, and of steps per
    CPU second."""
    lines = ["| env | " + " | ".join(args.contenders) + " | envpool / sync | envpool / async |"]
    lines.append("| --- |" + " ---: |" * (len(args.contenders) + 2))
    for env_id in args.env:
        med = {c: statistics.median(rates[(env_id, c)]) for c in args.contenders}
        cells = " | ".join(f"{med[c]:,.0f}" for c in args.contenders)
        ratio = [
            f"{med['envpool'] / med[b]:.2f}x" if "envpool" in med and b in med else "-"
            for b in ("sync", "async")
        ]
        lines.append(f"| {env_id} | {cells} | {ratio[0]} | {ratio[1]} |")
    lines += ["", "Steps per CPU second (medians):", ""]
    lines.append("| env | " + " | ".join(args.contenders) + " |")
    lines.append("| --- |" + " ---: |" * len(args.contenders))
    for env_id in args.env:
        cells = " | ".join(
            f"{statistics.median(cpu_rates[(env_id, c)]):,.0f}" for c in args.contenders
        )
        lines.append(f"| {env_id} | {cells} |")
    return lines


def run(args, argv: list[str]) -> None:
    """The rounds, the tables, the record."""
    prov = records.provenance(MODULE, argv)
    rates: dict[tuple[str, str], list[float]] = {}
    cpu_rates: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    for r in range(args.rounds):
        for env_id in args.env:
            for contender in args.contenders:
                loads.append(os.getloadavg()[0])
                cmd = proc.worker_command("envpool", "--contender", contender, "--env", env_id,
                                          "--num-envs", str(args.num_envs),
                                          "--steps", str(args.steps))  # fmt: skip
                rate, cpu_rate = proc.run_worker(contender, cmd)
                rates.setdefault((env_id, contender), []).append(rate)
                cpu_rates.setdefault((env_id, contender), []).append(cpu_rate)
                print(
                    f"round {r + 1} {env_id:16s} {contender:12s} {rate:10,.0f} steps/s "
                    f"{cpu_rate:10,.0f} steps/CPU-s",
                    flush=True,
                )
    print(
        f"\n{args.num_envs} envs, {os.cpu_count()} cores, load average (1 min) during the runs: "
        f"median {statistics.median(loads):.2f}, min {min(loads):.2f}, max {max(loads):.2f}\n"
    )
    print("\n".join(tables(args, rates, cpu_rates)))
    if args.json:
        record = {
            "num_envs": args.num_envs,
            "steps": args.steps,
            "steps_per_s": {f"{e} {c}": v for (e, c), v in rates.items()},
            "steps_per_cpu_s": {f"{e} {c}": v for (e, c), v in cpu_rates.items()},
            "load_average": loads,
            "provenance": prov,
        }
        records.write_results(Path(args.json), record)


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--env", nargs="+", default=["Humanoid-v5", "HalfCheetah-v5"])
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000, help="vector steps per measurement")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    p.add_argument("--json", default=None, help="write the record here")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        for name in ("num_envs", "steps", "rounds"):
            if getattr(args, name) < 1:
                raise cli_args.BadInput(f"--{name.replace('_', '-')} must be at least 1")
        run(args, argv)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
