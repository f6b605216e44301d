"""Where a training iteration on an mjlab task spends its time, and how much work it does.

Builds the run a config describes (as `train` would), runs one iteration to warm up (Warp's
kernels, the first rollout's statistics, a compiled update), then times `--iterations` more
with a clock around each part:

    mjlab step     mjlab's step: MuJoCo Warp's substeps, the managers (rewards, terminations,
                   commands, observations) and the resets mjlab's auto-reset does inside it
    mjlab reset    the backend's `reset(env_ids)` after a step: another forward pass, the
                   sensors and every observation term of every env (the envs whose episode
                   was truncated, after their final observation was read)
    inference      the policy acting on every env, and V(final observation) of truncations
    update         advantages and the PPO update (with trainer.compile, the compiled step)
    (the rest)     the collector's bookkeeping, the observation statistics, logging

and counts, per iteration, the work that does not depend on the machine: MuJoCo Warp forward
passes and observation computes (one each per step is what mjlab's own auto-reset loop pays),
resets after a step, episode resets (mjlab's `_reset_idx`, inside or after a step), the
episodes that ended by termination and by truncation, and the rows valued for bootstraps
(V(final observation); the rollout's V(s_T) aside).

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
        counts: collections.Counter = collections.Counter()
        instrument(trainer, clock, counts, sync)
        sync()
        start = time.perf_counter()
        for _ in range(args.iterations):
            trainer._iteration(_Clock())
            counts["terminations"] += int(trainer.buffer.terminated.sum())
            counts["truncations"] += int(trainer.buffer.truncated.sum())
        sync()
        total = time.perf_counter() - start
        report(cfg, device, (clock, counts), (total, plain, args.iterations))
        trainer.envs.close()


def instrument(trainer, clock: collections.Counter, counts: collections.Counter, sync) -> None:
    """Clocks and counters around the parts of a built run's iteration."""
    env = trainer.envs.env
    timed(env, "step", clock, "mjlab step", sync)
    timed(env, "reset", clock, "mjlab reset", sync)
    timed(env, "_reset_idx", clock, "episode resets", sync)
    timed(trainer.policy, "act", clock, "inference", sync)
    timed(trainer.policy, "value", clock, "inference", sync)
    timed(type(trainer.updater), "update", clock, "update", sync)
    counted(env.sim, "forward", counts, "forward passes")
    counted(env.observation_manager, "compute", counts, "observation computes")
    counted(env, "reset", counts, "resets after a step")
    counted(env, "_reset_idx", counts, "episode resets")
    value = trainer.policy.value

    def rows(obs, *args, **kwargs):
        """V(obs), its rows counted."""
        counts["rows valued"] += next(iter(obs.values())).shape[0]
        return value(obs, *args, **kwargs)

    trainer.policy.value = rows


def counted(owner, name: str, counts: collections.Counter, key: str) -> None:
    """Count the calls of `owner.name`."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        """The call, counted."""
        counts[key] += 1
        return inner(*args, **kwargs)

    setattr(owner, name, wrapper)


def report(cfg, device, measured, timing) -> None:
    """Print the split of an iteration's time and its counts of work."""
    clock, counts = measured
    total, plain, iterations = timing
    n, steps = cfg.env.num_envs, cfg.algorithm.rollout_steps
    print(f"{n} envs x {steps} steps on {device}, per iteration:")
    parts = ("mjlab step", "mjlab reset", "inference", "update")
    for key in parts:
        share = clock[key] / iterations
        print(f"  {key:<14}{share * 1e3:10.1f} ms  {clock[key] / total:6.1%}")
    rest = (total - sum(clock[k] for k in parts)) / iterations
    print(f"  {'(the rest)':<14}{rest * 1e3:10.1f} ms  {rest * iterations / total:6.1%}")
    resets = clock["episode resets"] / iterations
    print(f"  of the two mjlab rows, episode resets (_reset_idx): {resets * 1e3:.1f} ms")
    print(
        f"  whole iteration {plain * 1e3:,.1f} ms unsynchronized: {steps * n / plain:,.0f} env steps/s"
    )
    bootstraps = counts["rows valued"] - n * iterations  # less each rollout's V(s_T)
    per = collections.Counter({k: v / iterations for k, v in counts.items()})
    print(
        f"  work per iteration ({steps} steps): {per['forward passes']:g} forward passes, "
        f"{per['observation computes']:g} observation computes, "
        f"{per['resets after a step']:g} resets after a step, "
        f"{per['episode resets']:g} episode resets; episodes ended by termination "
        f"{per['terminations']:g}, by truncation {per['truncations']:g}; "
        f"{bootstraps / iterations:g} rows valued for bootstraps"
    )


class _Clock:
    """The trainer's clock, unused here (its rate and ETA are not reported)."""

    def sps(self, step: int) -> float:
        return 0.0

    def restart_eta(self, step: int) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
