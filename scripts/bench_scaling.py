"""Scaling benchmark: 1 process on one core vs N processes (torchrun, Gloo), each on its own core.

Each process keeps the same number of envs, so N processes simulate N times as many. Both runs
train the same config for the same number of iterations per process; the table reports the
global steps/s (from metrics.jsonl, first iteration excluded) and the scaling efficiency
(steps/s with N processes / (N x steps/s with one)). Rounds alternate the two contenders.

    python scripts/bench_scaling.py --config configs/halfcheetah.yaml --iterations 6
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pinned_main() -> None:
    """Entry point of one process: pin to the core of its LOCAL_RANK, then run the CLI."""
    core = int(os.environ.get("LOCAL_RANK", "0")) % os.cpu_count()
    os.sched_setaffinity(0, {core})
    sys.argv = ["embodied-ppo", *sys.argv[2:]]
    from embodied_ppo.app.cli import main

    main()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps_per_second(run_dir: Path) -> float:
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first, last = records[0], records[-1]
    return (last["global_step"] - first["global_step"]) / (last["time"] - first["time"])


def run(nproc: int, config: str, iterations: int, overrides: list[str]) -> float:
    from embodied_ppo.config.loading import load_config

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cfg = load_config(config, overrides)
        total = (iterations + 1) * cfg.batch_size * nproc
        args = [
            config,
            *overrides,
            f"trainer.total_steps={total}",
            f"trainer.run_dir={run_dir}",
            "trainer.checkpoint_interval=1000000",
            "trainer.device=cpu",
        ]
        me = [__file__, "--pinned", "train", *args]
        if nproc == 1:
            cmd = [sys.executable, *me]
        else:
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nproc_per_node={nproc}",
                f"--master_port={free_port()}",
                *me,
            ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        if out.returncode != 0:
            sys.exit(f"{nproc} process(es) failed:\n{out.stderr[-3000:]}")
        return steps_per_second(run_dir)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--pinned":
        pinned_main()
        return
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default="configs/halfcheetah.yaml")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--iterations", type=int, default=5, help="measured iterations per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    results: dict[int, list[float]] = {1: [], args.nproc: []}
    for r in range(args.rounds):
        for n in results:
            results[n].append(run(n, args.config, args.iterations, args.overrides))
            print(
                f"round {r + 1}/{args.rounds}: {n} process(es) {results[n][-1]:9,.0f} steps/s",
                flush=True,
            )
    med = {n: statistics.median(v) for n, v in results.items()}
    eff = med[args.nproc] / (args.nproc * med[1])
    print(
        f"\n{args.config} {' '.join(args.overrides)}: {os.cpu_count()} cores, one core per process"
    )
    for n, v in med.items():
        print(f"{n} process(es): {v:9,.0f} steps/s (median of {args.rounds})")
    print(f"speed-up {med[args.nproc] / med[1]:.2f}x, efficiency {eff:.0%}")
    if args.json:
        result = {"config": args.config, "overrides": args.overrides, "steps_per_s": results}
        result.update(median=med, efficiency=eff)
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
