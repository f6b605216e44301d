"""Where a training iteration on an mjlab task spends its time: physics, inference, update.

Builds the run a config describes (as `train` would), runs one iteration to warm up (Warp's
kernels, the first rollout's statistics, a compiled update), then times `--iterations` more
with a clock around each part:

    physics        mjlab's step: MuJoCo Warp's substeps and the managers (rewards, terminations,
                   commands, observations), and the resets of the envs whose episode ended
    inference      the policy acting on every env, and V(final observation) of truncations
    update         advantages and the PPO update (with trainer.compile, the compiled step)
    (the rest)     the collector's bookkeeping, the observation statistics, logging

On a GPU the clock synchronizes the device around every timed call, so the parts add up to the
iteration (the synchronizations cost a little: the whole-iteration rate is also printed
without them). `--physics-only` times the env's step alone with random actions, the resets of
ended episodes included (random actions topple a legged robot, whose falls and resets cost more
than a walking policy's steps: the physics of a task that keeps resetting, not a ceiling).

    python -m scripts.bench.profile_mjlab configs/mjlab_go1_flat.yaml
    python -m scripts.bench.profile_mjlab configs/mjlab_go1_flat.yaml env.num_envs=1024 --iterations 5
    python -m scripts.bench.profile_mjlab configs/mjlab_go1_flat.yaml trainer.device=cpu \\
        env.num_envs=16 algorithm.minibatch_size=96 --iterations 2
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.timing import timed

MODULE = "scripts.bench.profile_mjlab"


def build_parser() -> cli_args.Parser:
    """The profile's command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--physics-only", action="store_true", help="time mjlab's step alone")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the profile with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), profile, argv)


def profile(args) -> None:
    """Build the run, time its iterations, print the split."""
    if args.iterations < 1:
        raise cli_args.BadInput("--iterations must be at least 1")
    import torch

    from embodied_ppo.config.loading import load_config
    from embodied_ppo.core.errors import UserError
    from embodied_ppo.runner.trainer import Trainer

    try:
        cfg = load_config(args.config, args.overrides)
    except UserError as exc:
        raise cli_args.BadInput(str(exc)) from None
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, Path(run_dir))
        device = trainer.device
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        n = cfg.env.num_envs
        if args.physics_only:
            # The backend's step: mjlab's step, then the reset of the envs whose episode ended
            # (mjlab refuses to step an ended env again with auto_reset off).
            envs = trainer.envs
            actions = torch.randn(n, envs.info.action_dim, device=device) * 0.3
            for _ in range(10):
                envs.step(actions)
            steps = 24 * args.iterations
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                envs.step(actions)
            sync()
            seconds = time.perf_counter() - start
            print(f"{n} envs on {device}: physics alone {steps * n / seconds:,.0f} env steps/s")
            envs.close()
            return
        trainer._iteration(_Clock())  # warm-up: kernels, statistics, compilation
        sync()
        start = time.perf_counter()
        for _ in range(args.iterations):
            trainer._iteration(_Clock())
        sync()
        plain = (time.perf_counter() - start) / args.iterations
        clock: collections.Counter = collections.Counter()
        timed(trainer.envs.env, "step", clock, "physics", sync)
        timed(trainer.envs.env, "reset", clock, "physics", sync)
        timed(trainer.policy, "act", clock, "inference", sync)
        timed(trainer.policy, "value", clock, "inference", sync)
        timed(trainer.updater, "update", clock, "update", sync)
        sync()
        start = time.perf_counter()
        for _ in range(args.iterations):
            trainer._iteration(_Clock())
        sync()
        total = time.perf_counter() - start
        steps = cfg.algorithm.rollout_steps * n
        print(f"{n} envs x {cfg.algorithm.rollout_steps} steps on {device}, per iteration:")
        for key in ("physics", "inference", "update"):
            share = clock[key] / args.iterations
            print(f"  {key:<12}{share * 1e3:10.1f} ms  {clock[key] / total:6.1%}")
        rest = (total - sum(clock.values())) / args.iterations
        print(f"  {'(the rest)':<12}{rest * 1e3:10.1f} ms  {rest * args.iterations / total:6.1%}")
        print(
            f"  whole iteration {plain * 1e3:,.1f} ms unsynchronized: "
            f"{steps / plain:,.0f} env steps/s"
        )
        trainer.envs.close()


class _Clock:
    """The trainer's clock, unused here (its rate and ETA are not reported)."""

    def sps(self, step: int) -> float:
        return 0.0

    def restart_eta(self, step: int) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
