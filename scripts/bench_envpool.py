"""Raw environment throughput of the env backends: envpool vs sync (1 and 2 threads, or split
over 2 processes) vs async.

Random actions (drawn before timing), no policy: env steps per second of `envs.step` through our
wrappers (`make_env`: what the collector sees, SAME_STEP resets and statistics included) and, for
reference, of the vector envs alone (envpool's `step` with its NEXT_STEP resets; our serial
vector env behind the sync backend). Every measurement runs in a fresh subprocess and the contenders alternate round by round, so
drift in the machine's load hits all of them alike; the tables give medians over rounds (steps per
wall-clock second and per CPU second) and the 1-minute load average seen around each round.

Example:
    python scripts/bench_envpool.py --env Humanoid-v5 HalfCheetah-v5 --num-envs 8 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = (
    "envpool",
    "sync",
    "sync_threads",
    "sync_processes",
    "async",
    "envpool_lib",
    "sync_lib",
)


def measure(contender: str, env_id: str, num_envs: int, steps: int) -> tuple[float, float]:
    """Env steps per wall-clock second and per CPU second of one contender (in the child process).

    CPU time counts every thread of the process and, for `async`, its worker processes too; it
    says what a step costs whatever else the machine runs.
    """
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from embodied_ppo.config.building import from_dict
    from embodied_ppo.vecenv import make_env

    backend = contender.split("_")[0]
    threads = 2 if contender == "sync_threads" else 1
    processes = 2 if contender == "sync_processes" else 1
    env = {"id": env_id, "num_envs": num_envs, "backend": backend, "threads": threads}
    cfg = from_dict({"env": {**env, "processes": processes}}).env
    envs = make_env(cfg, seed=0)
    envs.reset()
    actions = [envs.sample_actions() for _ in range(steps)]
    if contender == "envpool_lib":
        pool = envs._pool
        actions = [np.clip(a, envs._low, envs._high).astype(np.float64) for a in actions]
        step = pool.step
    elif contender == "sync_lib":
        step = envs.env.step
    else:
        step = envs.step
    for a in actions[:20]:  # warm up
        step(a)
    cpu0, start = _cpu_seconds(envs), time.perf_counter()
    for a in actions:
        step(a)
    elapsed, cpu = time.perf_counter() - start, _cpu_seconds(envs) - cpu0
    envs.close()
    return steps * num_envs / elapsed, steps * num_envs / cpu


def _cpu_seconds(envs: object) -> float:
    """CPU seconds used so far by this process (all threads) and its env worker processes."""
    total = time.process_time()
    for process in getattr(getattr(envs, "env", None), "processes", []):
        with open(f"/proc/{process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="+", default=["Humanoid-v5", "HalfCheetah-v5"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000, help="vector steps per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "ENV"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.num_envs, args.steps)))
        return

    rates: dict[tuple[str, str], list[float]] = {}
    cpu_rates: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    for r in range(args.rounds):
        for env_id in args.env:
            for contender in args.contenders:
                loads.append(os.getloadavg()[0])
                out = subprocess.run(
                    [sys.executable, __file__, "--child", contender, env_id]
                    + ["--num-envs", str(args.num_envs), "--steps", str(args.steps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rate, cpu_rate = json.loads(out.stdout.strip().splitlines()[-1])
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
    print("| env | " + " | ".join(args.contenders) + " | envpool / sync | envpool / async |")
    print("| --- |" + " ---: |" * (len(args.contenders) + 2))
    for env_id in args.env:
        med = {c: statistics.median(rates[(env_id, c)]) for c in args.contenders}
        cells = " | ".join(f"{med[c]:,.0f}" for c in args.contenders)
        ratio = [
            f"{med['envpool'] / med[b]:.2f}x" if "envpool" in med and b in med else "-"
            for b in ("sync", "async")
        ]
        print(f"| {env_id} | {cells} | {ratio[0]} | {ratio[1]} |")
    print("\nSteps per CPU second (medians):\n")
    print("| env | " + " | ".join(args.contenders) + " |")
    print("| --- |" + " ---: |" * len(args.contenders))
    for env_id in args.env:
        cells = " | ".join(
            f"{statistics.median(cpu_rates[(env_id, c)]):,.0f}" for c in args.contenders
        )
        print(f"| {env_id} | {cells} |")


if __name__ == "__main__":
    main()
