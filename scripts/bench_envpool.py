"""Raw environment throughput of the env backends: envpool vs gymnasium sync vs async.

Random actions (drawn before timing), no policy: env steps per second of `envs.step` through our
wrappers (`make_env`: what the collector sees, SAME_STEP resets and statistics included) and, for
reference, of the libraries alone (envpool's `step` with its NEXT_STEP resets; gymnasium's vector
env). Every measurement runs in a fresh subprocess and the contenders alternate round by round, so
drift in the machine's load hits all of them alike; the table gives medians over rounds and the
1-minute load average seen around each round.

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
CONTENDERS = ("envpool", "sync", "async", "envpool_lib", "sync_lib")


def measure(contender: str, env_id: str, num_envs: int, steps: int) -> float:
    """Env steps per second of one contender (run inside the child process)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from embodied_ppo.config import from_dict
    from embodied_ppo.envs import make_env

    backend = contender.removesuffix("_lib")
    cfg = from_dict({"env": {"id": env_id, "num_envs": num_envs, "backend": backend}}).env
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
    start = time.perf_counter()
    for a in actions:
        step(a)
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * num_envs / elapsed


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
                rate = json.loads(out.stdout.strip().splitlines()[-1])
                rates.setdefault((env_id, contender), []).append(rate)
                print(
                    f"round {r + 1} {env_id:16s} {contender:12s} {rate:10,.0f} steps/s", flush=True
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


if __name__ == "__main__":
    main()
