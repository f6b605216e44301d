"""One contender of the gradient-step timing (scripts.bench.update), in its own process: update
after update on one fixed random batch of a network shape's rollout size.

    python -m scripts.bench.workers.update --contender compiled --shape humanoid --updates 5

Contenders: `compiled` (our update, torch.compile'd; compilation before timing starts),
`eager` (the same without compiling), `baseline` (the numpy update of a checkout from before
the compiled one, imported from PYTHONPATH). Prints {"ms", "first_s", "threads"} as one JSON
line: the median over updates of an update's wall time over its gradient steps, the first
update's seconds (compilation included) and the threads used; with `--profile`, the compiled
step's time by kernel instead (Inductor's kernel profiling, torch.profiler).
"""

from __future__ import annotations

import json
import statistics
import time

from scripts.bench.lib import args as cli_args

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


def measure(
    contender: str, shape: str, updates: int, profile: bool = False, device_name: str = "cpu"
) -> dict:
    """Time `updates` updates of one contender on one shape in this process (after a first
    update that compiles): its median ms per gradient step, the first update's seconds and its
    threads; with `profile`, the compiled step's kernels instead."""
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
        from embodied_ppo.algo.update import PPOUpdate
        from embodied_ppo.runner.build import update_threads

        n = update_threads(device, policy, mb)
        torch.set_num_threads(n)
        upd = PPOUpdate(
            policy,
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


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print the JSON line."""
    p = cli_args.parser("scripts.bench.workers.update", __doc__)
    p.add_argument("--contender", choices=("compiled", "eager", "baseline"), required=True)
    p.add_argument("--shape", choices=list(SHAPES), required=True)
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--profile", action="store_true")
    return cli_args.run_main(
        p,
        lambda a: print(json.dumps(measure(a.contender, a.shape, a.updates, a.profile, a.device))),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
