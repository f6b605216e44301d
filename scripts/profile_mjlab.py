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

    python scripts/profile_mjlab.py configs/mjlab_go1_flat.yaml
    python scripts/profile_mjlab.py configs/mjlab_go1_flat.yaml env.num_envs=1024 --iterations 5
    python scripts/profile_mjlab.py configs/mjlab_go1_flat.yaml trainer.device=cpu \\
        env.num_envs=16 algorithm.minibatch_size=96 --iterations 2
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(owner: Any, name: str, clock: collections.Counter, key: str, sync: Callable) -> None:
    """Wrap `owner.name` so its calls add their seconds to clock[key] (synchronized)."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        """The wrapped call, timed."""
        sync()
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            sync()
            clock[key] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def main() -> None:
    """Parse the arguments, build the run, time its iterations, print the split."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--physics-only", action="store_true", help="time mjlab's step alone")
    args = p.parse_args()

    # In the function: the path to the package is set up above, before these imports.
    import torch

    from embodied_ppo.config.loading import load_config
    from embodied_ppo.runner.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
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
    main()
