"""Time one gradient step of the PPO update for the HalfCheetah and Humanoid network shapes.

Contenders, each in its own fresh subprocess, alternating round by round:

    compiled   our update, torch.compile'd (the default; compilation before timing starts)
    eager      the same code without compiling (trainer.compile: false)
    baseline   another checkout's update, given with --baseline-src (e.g. one with the numpy
               update: `git worktree add /tmp/before <commit>`), as that checkout picks it

Each contender runs update after update on one fixed random batch of the shape's rollout size;
a step's time is an update's wall time over its gradient steps, median over updates. Threads
are each contender's own default for that shape (ours: trainer.build.update_threads), printed.

    python scripts/bench_update.py --shape halfcheetah humanoid --rounds 5
    python scripts/bench_update.py --baseline-src /tmp/before

`--profile` instead splits the compiled step's time by kernel (Inductor's kernel profiling,
torch.profiler): the matrix products, each fused kernel, and what runs outside the compiled
graph, per gradient step, with the products' rate against this machine's rate for the same
products in plain torch:

    python scripts/bench_update.py --shape humanoid --profile

`--device cuda` runs the contenders on the GPU (the compiled step then runs under CUDA graphs);
the `go1` shape is the legged configs' network at GPU-batched scale (mjlab_go1_flat.yaml:
512-256-128 ELU, 4096 envs x 24 steps, minibatches of 24,576):

    python scripts/bench_update.py --device cuda --shape halfcheetah humanoid go1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (obs_dim, action_dim, hidden, minibatch, rollout transitions, activation) of the configs'
# networks.
SHAPES = {
    "halfcheetah": (17, 6, [64, 64], 64, 2048, "tanh"),
    "humanoid": (348, 17, [256, 256], 512, 4096, "tanh"),
    "go1": (48, 12, [512, 256, 128], 24576, 98304, "elu"),
}


def matmul_flops(obs_dim: int, act_dim: int, hidden: list[int], rows: int) -> float:
    """Multiply-adds x 2 of one gradient step's matrix products (separate actor and critic
    MLPs): forward, weight gradients, and input gradients of every layer but the first."""
    flops = 0.0
    for out_dim in (act_dim, 1):
        dims = [obs_dim, *hidden, out_dim]
        layers = list(zip(dims[:-1], dims[1:]))
        flops += 2 * rows * sum(i * o for i, o in layers) * 2  # forward, weight gradient
        flops += 2 * rows * sum(i * o for i, o in layers[1:])  # input gradient
    return flops


def plain_matmul_rate(obs_dim: int, hidden: list[int], rows: int) -> float:
    """FLOP/s of torch.mm on the step's largest product shape (rows x obs_dim @ obs_dim x
    hidden), this process's threads: what the products could reach here."""
    import torch

    a, b = torch.randn(rows, obs_dim), torch.randn(obs_dim, hidden[0])
    for _ in range(20):
        a @ b
    start, reps = time.perf_counter(), 200
    for _ in range(reps):
        a @ b
    return 2 * rows * obs_dim * hidden[0] * reps / (time.perf_counter() - start)


def profile_rows(upd, batch: dict, rows: int, updates: int) -> list[tuple[str, float, float]]:
    """(kernel or op, ms per gradient step, calls per step) of `updates` updates, by self time."""
    from torch.profiler import ProfilerActivity, profile

    steps = 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            steps += upd.update(batch, rows)["num_gradient_steps"]
    out = []
    for e in prof.key_averages():
        name = e.key
        if name.startswith("## Call CompiledFxGraph"):
            name = "compiled graph's wrapper (self)"
        out.append((name, e.self_cpu_time_total / 1e3 / steps, e.count / steps))
    return sorted(out, key=lambda r: -r[1])


def worker(
    contender: str, shape: str, updates: int, profile: bool = False, device_name: str = "cpu"
) -> dict:
    import torch

    if profile:  # before compiling: the generated kernels then report to torch.profiler
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True

    from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig
    from embodied_ppo.model.actor_critic import ActorCritic

    obs_dim, act_dim, hidden, mb, rows, activation = SHAPES[shape]
    device = torch.device(device_name)
    spec = {
        "obs_dim": obs_dim,
        "action_kind": "gaussian",
        "action_dim": act_dim,
        "action_low": [-1.0] * act_dim,
        "action_high": [1.0] * act_dim,
        "hidden_sizes": hidden,
        "activation": activation,
        "share_backbone": False,
        "log_std_init": 0.0,
        "state_dependent_std": False,
        "init": "orthogonal",
        "normalize_obs": True,
        "clip_obs": 10.0,
    }
    torch.manual_seed(0)
    policy = ActorCritic(spec).to(device)
    g = torch.Generator().manual_seed(1)
    batch = {
        "obs": torch.randn(rows, obs_dim, generator=g),
        "actions": torch.randn(rows, act_dim, generator=g),
        "logprobs": torch.randn(rows, generator=g) - 8.0,
        "values": torch.randn(rows, generator=g),
        "advantages": torch.randn(rows, generator=g),
        "returns": torch.randn(rows, generator=g),
        "mask": torch.ones(rows),
    }
    batch = {k: v.to(device) for k, v in batch.items()}
    algo = AlgorithmConfig(minibatch_size=mb, update_epochs=1, rollout_steps=rows)
    optim = OptimConfig()
    if contender == "baseline":  # the numpy update of an earlier checkout, as it chose it
        from embodied_ppo.host_update import make_updater
        from embodied_ppo.ppo import make_optimizer  # the earlier checkout's layout

        upd = make_updater(
            policy, algo, optim, make_optimizer(policy, optim), g, None, "auto", False
        )
        threads = "numpy BLAS: every core in the update"
    else:
        from embodied_ppo.algo.settings import UpdateSettings
        from embodied_ppo.algo.update import PPOUpdate, make_optimizer
        from embodied_ppo.runner.build import update_threads

        n = update_threads(device, policy, mb)
        torch.set_num_threads(n)
        upd = PPOUpdate(
            policy,
            make_optimizer(policy, optim),
            g,
            UpdateSettings(algo, optim, compile=contender == "compiled"),
        )
        threads = f"torch: {n}" + (
            f"; {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
        )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    start = time.perf_counter()
    upd.update(batch, rows)  # compiles, for the compiled contender
    sync()
    first = time.perf_counter() - start
    if profile:
        upd.update(batch, rows)  # warm
        kernels = profile_rows(upd, batch, rows, updates)
        return {
            "kernels": kernels,
            "matmul_flops": matmul_flops(obs_dim, act_dim, hidden, mb),
            "plain_rate": plain_matmul_rate(obs_dim, hidden, mb),
            "threads": threads,
        }
    per_step = []
    for _ in range(updates):
        sync()
        start = time.perf_counter()
        m = upd.update(batch, rows)
        sync()
        per_step.append((time.perf_counter() - start) / m["num_gradient_steps"])
    return {"ms": 1e3 * statistics.median(per_step), "first_s": first, "threads": threads}


def run_worker(
    contender: str,
    shape: str,
    updates: int,
    src: Path,
    profile: bool = False,
    device: str = "cpu",
) -> dict:
    """`worker` in a fresh subprocess that imports the package from `src`."""
    env = dict(os.environ)
    # src first; what the caller had on the path stays after it (packages a machine carries
    # there, as a GPU machine without a package registry does)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", contender, shape]
    cmd += ["--updates", str(updates), "--device", device] + (["--profile"] if profile else [])
    # Run outside both checkouts, so PYTHONPATH alone decides which code runs.
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")
    if out.returncode != 0:
        sys.exit(f"{contender} {shape} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--contenders", nargs="+", default=["compiled", "eager"])
    p.add_argument("--baseline-src", help="checkout whose update is the baseline contender")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--updates", type=int, default=5, help="timed updates per round")
    p.add_argument("--json", help="write the results here")
    p.add_argument(
        "--profile", action="store_true", help="split the compiled step's time by kernel"
    )
    p.add_argument("--worker", nargs=2, metavar=("CONTENDER", "SHAPE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        result = worker(args.worker[0], args.worker[1], args.updates, args.profile, args.device)
        print(json.dumps(result))
        return
    if args.profile and args.device != "cpu":
        p.error("--profile splits the CPU step (Inductor's C++ kernels); use --device cpu")
    if args.profile:
        for shape in args.shape:
            print_profile(shape, run_worker("compiled", shape, args.updates, ROOT, True))
        return
    contenders = list(args.contenders) + (["baseline"] if args.baseline_src else [])
    results: dict = {}
    for shape in args.shape:
        for r in range(args.rounds):
            for c in contenders:
                src = Path(args.baseline_src).resolve() if c == "baseline" else ROOT
                m = run_worker(c, shape, args.updates, src, device=args.device)
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
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
