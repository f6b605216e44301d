"""Scaling: 1 process on one core against N processes (torchrun, Gloo), each on its own core.

Each process keeps the same number of envs, so N processes simulate N times as many. Both runs
train the same config for the same number of iterations per process, each process pinned to
its core (scripts.bench.workers.pinned_cli); the table reports the global steps/s (from
metrics.jsonl, first iteration excluded) and the scaling efficiency (steps/s with N processes
/ (N x steps/s with one)). Rounds alternate the two contenders.

    python -m scripts.bench.scaling --config configs/halfcheetah.yaml --iterations 6
    python -m scripts.bench.scaling --config configs/halfcheetah.yaml algorithm.minibatch_size=512

`--json FILE` writes the record: every round's steps/s per process count, the medians, the
efficiency, and its provenance (command, commit, date, machine).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records

MODULE = "scripts.bench.scaling"


def free_port() -> int:
    """A TCP port nothing listens on now, for torchrun's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps_per_second(run_dir: Path) -> float:
    """Global steps/s of a run from its metrics.jsonl, its first iteration excluded."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first, last = rows[0], rows[-1]
    return (last["global_step"] - first["global_step"]) / (last["time"] - first["time"])


def measure(nproc: int, config: str, iterations: int, overrides: list[str]) -> float:
    """Steps/s of `nproc` pinned processes training `config` for `iterations` more iterations
    than the first (each process's batch of the config)."""
    from embodied_ppo.config.loading import load_config

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cfg = load_config(config, overrides)
        total = (iterations + 1) * cfg.batch_size * nproc
        train = ["train", config, *overrides, f"trainer.total_steps={total}",
                 f"trainer.run_dir={run_dir}", "trainer.checkpoint_interval=1000000",
                 "trainer.device=cpu"]  # fmt: skip
        module = ["-m", "scripts.bench.workers.pinned_cli", *train]
        if nproc == 1:
            cmd = [sys.executable, *module]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                   f"--master_port={free_port()}", *module]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=proc.ROOT, env=env)
        if out.returncode != 0:
            sys.exit(f"{nproc} process(es) failed:\n{out.stderr[-3000:]}")
        return steps_per_second(run_dir)


def run(args, argv: list[str]) -> None:
    """The rounds, the table, the record."""
    prov = records.provenance(MODULE, argv)
    results: dict[int, list[float]] = {1: [], args.nproc: []}
    for r in range(args.rounds):
        for n in results:
            results[n].append(measure(n, args.config, args.iterations, args.overrides))
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
        result.update(median=med, efficiency=eff, provenance=prov)
        records.write_results(Path(args.json), result)


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--config", default="configs/halfcheetah.yaml")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--iterations", type=int, default=5, help="measured iterations per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("overrides", nargs="*", help="config overrides, KEY=VALUE")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if not Path(args.config).is_file():
            raise cli_args.BadInput(f"--config {args.config}: no such file")
        if args.nproc < 2:
            raise cli_args.BadInput("--nproc must be at least 2 (one process is the baseline)")
        for name in ("iterations", "rounds"):
            if getattr(args, name) < 1:
                raise cli_args.BadInput(f"--{name} must be at least 1")
        run(args, argv)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
