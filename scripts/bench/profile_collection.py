"""Where one rollout's collection spends its time, per vector step.

Builds the run a config describes (as `train` would, without compiling the update), collects
and merges the first rollout (its observation statistics), then times `--rollouts` more
collections with a clock around each part of a vector step:

    envs.step          the vector env's step, all of it (below: its parts)
      vector env       the backend's own step (Gymnasium's vector env, or the env processes)
        local group    env processes: the members this process steps itself
        waiting        env processes: waiting for the workers' steps after that
        sending        env processes: handing the workers their actions
      (the rest)       action clipping, checks, final observations, episode statistics
    inference          the policy acting (the numpy snapshot or the torch module)
    values             values of truncated episodes' final observations, and after the rollout
    (the rest)         the collector's own bookkeeping (staging, noise, the buffer)

Threads are as in training: one torch thread and one BLAS thread while collecting.

    python -m scripts.bench.profile_collection configs/humanoid.yaml
    python -m scripts.bench.profile_collection configs/humanoid.yaml env.processes=1 --rollouts 8

`--pipes` steps env processes by pipe messages instead of doorbells (vecenv.workers), for a
side-by-side comparison of the two transports: run both, alternating, e.g.

    for i in 1 2 3; do python -m scripts.bench.profile_collection configs/humanoid.yaml
                       python -m scripts.bench.profile_collection configs/humanoid.yaml --pipes
    done
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.timing import timed

MODULE = "scripts.bench.profile_collection"


def build_parser() -> cli_args.Parser:
    """The profile's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    p.add_argument("--rollouts", type=int, default=4, help="timed rollouts (default 4)")
    p.add_argument("--pipes", action="store_true", help="env processes: pipes, not doorbells")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the profile with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), profile, argv)


def profile(args) -> None:
    """Build the run, collect, time each part, print the split."""
    if args.rollouts < 1:
        raise cli_args.BadInput("--rollouts must be at least 1")
    import torch
    from threadpoolctl import threadpool_limits

    from embodied_ppo.config.loading import load_config
    from embodied_ppo.core.errors import UserError
    from embodied_ppo.runner.trainer import Trainer
    from embodied_ppo.vecenv import shared, workers
    from embodied_ppo.vecenv.workers import ProcessVectorEnv

    if args.pipes:
        shared.can_spin = workers.can_spin = lambda processes, threads: False

    try:
        cfg = load_config(args.config, [*args.overrides, "trainer.compile=false"])
    except UserError as exc:
        raise cli_args.BadInput(str(exc)) from None
    clock: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, Path(run_dir))
        collector, envs = trainer.collector, trainer.envs
        timed(collector.acting, "act", clock, "inference")
        timed(collector.acting, "values", clock, "values")
        timed(envs, "step", clock, "envs.step")
        backend = getattr(envs, "env", None)  # the Gymnasium backends' vector env
        if backend is not None:
            timed(backend, "step", clock, "vector env")
            if isinstance(backend, ProcessVectorEnv):
                timed(backend.local, "step_members", clock, "local group")
                timed(backend, "_finish_step", clock, "waiting")
                timed(backend, "_start_step", clock, "sending")
        torch.set_num_threads(1)
        try:
            with threadpool_limits(1, "blas"):
                collector.collect(None, 0)
                collector.merge_obs_statistics()
                clock.clear()
                start = time.perf_counter()
                for i in range(args.rollouts):
                    collector.collect(None, 1 + i)
                total = time.perf_counter() - start
        finally:
            envs.close()
    steps = args.rollouts * cfg.algorithm.rollout_steps
    transport = ""
    if isinstance(backend, ProcessVectorEnv):
        transport = " by doorbell" if backend.doorbell else " by pipe"
    ms = {k: 1e3 * v / steps for k, v in clock.items()}
    print(
        f"{args.config}: {cfg.env.num_envs} envs ({cfg.env.backend}, "
        f"{cfg.env.processes} processes{transport}, {cfg.env.threads} threads), "
        f"{args.rollouts} rollouts "
        f"of {cfg.algorithm.rollout_steps} vector steps: {1e3 * total / steps:.3f} ms per "
        f"vector step ({cfg.env.num_envs * steps / total:,.0f} env steps/s)"
    )

    def row(name: str, value: float, depth: int) -> None:
        print(f"  {'  ' * depth}{name:{22 - 2 * depth}s} {value:7.3f} ms")

    row("envs.step", ms.get("envs.step", 0.0), 0)
    if "vector env" in ms:
        row("vector env", ms["vector env"], 1)
        for key in ("local group", "waiting", "sending"):
            if key in ms:
                row(key, ms[key], 2)
        row("(the rest)", ms["envs.step"] - ms["vector env"], 1)
    row("inference", ms.get("inference", 0.0), 0)
    row("values", ms.get("values", 0.0), 0)
    known = ms.get("envs.step", 0.0) + ms.get("inference", 0.0) + ms.get("values", 0.0)
    row("(the rest)", 1e3 * total / steps - known, 0)


if __name__ == "__main__":
    sys.exit(main())
