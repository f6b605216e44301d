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
# (obs_dim, action_dim, hidden, minibatch, rollout transitions) of the configs' networks.
SHAPES = {
    "halfcheetah": (17, 6, [64, 64], 64, 2048),
    "humanoid": (348, 17, [256, 256], 512, 4096),
}


def worker(contender: str, shape: str, updates: int) -> dict:
    import torch

    from embodied_ppo.config import AlgorithmConfig, OptimConfig
    from embodied_ppo.modules.actor_critic import ActorCritic

    obs_dim, act_dim, hidden, mb, rows = SHAPES[shape]
    spec = {
        "obs_dim": obs_dim,
        "action_kind": "gaussian",
        "action_dim": act_dim,
        "action_low": [-1.0] * act_dim,
        "action_high": [1.0] * act_dim,
        "hidden_sizes": hidden,
        "activation": "tanh",
        "share_backbone": False,
        "log_std_init": 0.0,
        "state_dependent_std": False,
        "init": "orthogonal",
        "normalize_obs": True,
        "clip_obs": 10.0,
    }
    torch.manual_seed(0)
    policy = ActorCritic(spec)
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
    algo = AlgorithmConfig(minibatch_size=mb, update_epochs=1, rollout_steps=rows)
    optim = OptimConfig()
    if contender == "baseline":  # the numpy update of an earlier checkout, as it chose it
        from embodied_ppo.host_update import make_updater

        from embodied_ppo.ppo import make_optimizer

        upd = make_updater(
            policy, algo, optim, make_optimizer(policy, optim), g, None, "auto", False
        )
        threads = "numpy BLAS: every core in the update"
    else:
        from embodied_ppo.build import update_threads
        from embodied_ppo.ppo import PPOUpdate, make_optimizer

        n = update_threads(torch.device("cpu"), policy, mb)
        torch.set_num_threads(n)
        upd = PPOUpdate(
            policy, algo, optim, make_optimizer(policy, optim), g, compile=contender == "compiled"
        )
        threads = f"torch: {n}"
    start = time.perf_counter()
    upd.update(batch, rows)  # compiles, for the compiled contender
    first = time.perf_counter() - start
    per_step = []
    for _ in range(updates):
        start = time.perf_counter()
        m = upd.update(batch, rows)
        per_step.append((time.perf_counter() - start) / m["num_gradient_steps"])
    return {"ms": 1e3 * statistics.median(per_step), "first_s": first, "threads": threads}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--contenders", nargs="+", default=["compiled", "eager"])
    p.add_argument("--baseline-src", help="checkout whose update is the baseline contender")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--updates", type=int, default=5, help="timed updates per round")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--worker", nargs=2, metavar=("CONTENDER", "SHAPE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.updates)))
        return
    contenders = list(args.contenders) + (["baseline"] if args.baseline_src else [])
    results: dict = {}
    for shape in args.shape:
        for r in range(args.rounds):
            for c in contenders:
                env = dict(os.environ)
                src = Path(args.baseline_src).resolve() if c == "baseline" else ROOT
                env["PYTHONPATH"] = str(src)
                cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", c, shape]
                cmd += ["--updates", str(args.updates)]
                # Run outside both checkouts, so PYTHONPATH alone decides which code runs.
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")
                if out.returncode != 0:
                    sys.exit(f"{c} {shape} failed:\n{out.stderr}")
                m = json.loads(out.stdout.strip().splitlines()[-1])
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
        print(f"{shape}: median ms/step: {line}")
        if "baseline" in med:
            print(f"{shape}: compiled / baseline = {med['compiled'] / med['baseline']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
