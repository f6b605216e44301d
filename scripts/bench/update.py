"""Time one gradient step of the PPO update for the HalfCheetah, Humanoid and Go1 network shapes.

Contenders, each in its own fresh process (scripts.bench.workers.update), alternating round by
round:

    compiled   our update, torch.compile'd (the default; compilation before timing starts)
    eager      the same code without compiling (trainer.compile: false)
    baseline   another checkout's update, given with --baseline-src (e.g. one with the numpy
               update: `git worktree add /tmp/before <commit>`), as that checkout picks it

Each contender runs update after update on one fixed random batch of the shape's rollout size;
a step's time is an update's wall time over its gradient steps, median over updates. Threads
are each contender's own default for that shape (ours: trainer.build.update_threads), printed.

    python -m scripts.bench.update --shape halfcheetah humanoid --rounds 5
    python -m scripts.bench.update --baseline-src /tmp/before

`--profile` instead splits the compiled step's time by kernel (Inductor's kernel profiling,
torch.profiler): the matrix products, each fused kernel, and what runs outside the compiled
graph, per gradient step, with the products' rate against this machine's rate for the same
products in plain torch:

    python -m scripts.bench.update --shape humanoid --profile

`--device cuda` runs the contenders on the GPU (the compiled step then runs under CUDA graphs);
the `go1` shape is the legged configs' network at GPU-batched scale (mjlab_go1_flat.yaml:
512-256-128 ELU, 4096 envs x 24 steps, minibatches of 24,576):

    python -m scripts.bench.update --device cuda --shape halfcheetah humanoid go1

`--json FILE` writes the record: every round's measurement per shape and contender, and its
provenance (command, commit, date, machine).
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib import proc, records
from scripts.bench.workers.update import SHAPES

MODULE = "scripts.bench.update"


def measure(contender: str, shape: str, updates: int, src: Path, options: dict) -> dict:
    """One contender's measurement in a fresh process that imports the package from `src`
    (`options`: "device", and "profile" for the kernel split)."""
    cmd = proc.worker_command("update", "--contender", contender, "--shape", shape,
                              "--updates", str(updates), "--device", options.get("device", "cpu"))  # fmt: skip
    cmd += ["--profile"] if options.get("profile") else []
    with proc.outside_checkouts() as cwd:
        return proc.run_worker(f"{contender} {shape}", cmd, cwd=cwd, env=proc.checkout_env(src))


def print_profile(shape: str, m: dict, rows: int = 12) -> None:
    """The kernel table of one shape: the matrix products first, then the heaviest rest."""
    kernels = m["kernels"]
    total = sum(ms for _, ms, _ in kernels)
    products = [k for k in kernels if re.search(r"(^|_)(add)?mm(_out)?$", k[0])]
    mm_ms = sum(ms for _, ms, _ in products)
    print(f"{shape}: {total:.3f} ms per gradient step ({m['threads']}), by self time:")
    print(
        f"  matrix products       {mm_ms:7.3f} ms  {mm_ms / total:5.1%}  "
        f"{m['matmul_flops'] / (mm_ms / 1e3) / 1e9:6.1f} GFLOP/s "
        f"(plain torch.mm here: {m['plain_rate'] / 1e9:.1f})"
    )
    for name, ms, calls in [k for k in kernels if k not in products][:rows]:
        print(f"  {name[:60]:60s} {ms:7.3f} ms  {ms / total:5.1%}  x{calls:.2f}")


def run(args, argv: list[str]) -> None:
    """The rounds (or the profile), the medians, the record."""
    if args.profile:
        for shape in args.shape:
            print_profile(shape, measure("compiled", shape, args.updates, proc.ROOT,
                                         {"profile": True}))  # fmt: skip
        return
    prov = records.provenance(MODULE, argv)
    contenders = list(args.contenders) + (["baseline"] if args.baseline_src else [])
    results: dict = {}
    for shape in args.shape:
        for r in range(args.rounds):
            for c in contenders:
                src = Path(args.baseline_src).resolve() if c == "baseline" else proc.ROOT
                m = measure(c, shape, args.updates, src, {"device": args.device})
                results.setdefault(shape, {}).setdefault(c, []).append(m)
                print(
                    f"{shape} round {r + 1}: {c:9s} {m['ms']:8.3f} ms/step "
                    f"(first update {m['first_s']:.2f} s; {m['threads']})",
                    flush=True,
                )
    print()
    for shape, by in results.items():
        med = {c: statistics.median(x["ms"] for x in v) for c, v in by.items()}
        line = ", ".join(f"{c} {v:.3f}" for c, v in med.items())
        print(f"{shape}: median ms/step on {args.device}: {line}")
        rate = ", ".join(f"{c} {SHAPES[shape][3] / v * 1e3:,.0f}" for c, v in med.items())
        print(f"{shape}: samples/s through the update on {args.device}: {rate}")
        if "baseline" in med:
            print(f"{shape}: compiled / baseline = {med['compiled'] / med['baseline']:.2f}")
    if args.json:
        records.write_results(Path(args.json), {**results, "provenance": prov})


def build_parser() -> cli_args.Parser:
    """The benchmark's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--shape", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--contenders", nargs="+", choices=("compiled", "eager"),
                   default=["compiled", "eager"])  # fmt: skip
    p.add_argument("--baseline-src", help="checkout whose update is the baseline contender")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--updates", type=int, default=5, help="timed updates per round")
    p.add_argument("--json", help="write the record here")
    p.add_argument(
        "--profile", action="store_true", help="split the compiled step's time by kernel"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with `argv` (the process's arguments when None)."""
    argv = sys.argv[1:] if argv is None else list(argv)

    def body(args) -> None:
        if args.profile and args.device != "cpu":
            raise cli_args.BadInput(
                "--profile splits the CPU step (Inductor's C++ kernels); use --device cpu"
            )
        if args.baseline_src and not Path(args.baseline_src).is_dir():
            raise cli_args.BadInput(f"--baseline-src {args.baseline_src}: no such folder")
        for name in ("rounds", "updates"):
            if getattr(args, name) < 1:
                raise cli_args.BadInput(f"--{name} must be at least 1")
        run(args, argv)

    return cli_args.run_main(build_parser(), body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
