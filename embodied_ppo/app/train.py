"""The `train` command."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from embodied_ppo.app.launch import LAUNCHER_ENV
from embodied_ppo.app.relay import WallBudget, describe
from embodied_ppo.app.results import TrainResult
from embodied_ppo.app.session import _session, run_training, say
from embodied_ppo.app.signals import GracefulStop, exit_code
from embodied_ppo.core.errors import UserError
from embodied_ppo.runner import distributed


# ---------------------------------------------------------------------------------- command
def train_command(
    config_path: str | None,
    overrides: list[str],
    resume: str | None,
    use_intact: bool = False,
    more_steps: int | None = None,
    *,
    wall_time: float | None = None,
) -> int:
    """`embodied-ppo train CONFIG [overrides]` or `embodied-ppo train --resume RUN_DIR
    [--more STEPS]`; `wall_time` (--for): seconds to train before stopping at an iteration
    boundary with a checkpoint and status 0 (relay.WallBudget)."""
    if resume:
        overrides = ([config_path] if config_path else []) + overrides
    elif not config_path:
        raise UserError(
            "train: give a config file, e.g. `embodied-ppo train configs/cartpole.yaml`, "
            "or --resume RUN_DIR"
        )
    # Installed before anything starts, so that even an early SIGINT / SIGTERM stops cleanly.
    with (
        GracefulStop() as stop,
        _session(
            None if resume else config_path,
            overrides,
            None,
            resume,
            use_intact,
            None,
            more_steps=more_steps,
        ) as session,
    ):
        if isinstance(session, TrainResult):
            return 0  # already trained to trainer.total_steps
        trainer = session
        hint = resume_hint(trainer.run_dir)
        budget = WallBudget(wall_time) if wall_time is not None else None
        try:
            result = run_training(trainer, (), stop if budget is None else _either(stop, budget))
        except BaseException as exc:
            # A second signal stops at once, whatever exception its interruption surfaced as.
            if not isinstance(exc, KeyboardInterrupt) and stop.interrupted is None:
                raise
            last = trainer.last_checkpoint or "no checkpoint yet"
            say(f"\nstopped at once; last checkpoint: {last}; {hint}", file=sys.stderr)
            return exit_code(stop.interrupted or getattr(exc, "signum", signal.SIGINT))
        if result.stopped and budget is not None and budget.reached and not stop():
            assert wall_time is not None
            say(
                f"stopped at the wall-time budget ({describe(wall_time)}) at step "
                f"{result.global_step:,} (iteration {result.iteration}); checkpoint: "
                f"{result.checkpoint}; {hint}, with --for for another window (`embodied-ppo "
                f"pack {trainer.run_dir} RUN.tar.gz` carries it to another machine)"
            )
            return 0
        if result.stopped:
            say(
                f"stopped at step {result.global_step:,} (iteration {result.iteration}); "
                f"checkpoint: {result.checkpoint}; {hint}",
                file=sys.stderr,
            )
            return stop.exit_code
        ret = result.metrics.get("charts/episodic_return_100")
        say(
            f"done: {result.global_step:,} steps"
            + (f", mean return of the last 100 episodes {ret:.2f}" if ret is not None else "")
        )
        say(f"checkpoint: {result.checkpoint}")
        say(f"train longer with `embodied-ppo train --resume {trainer.run_dir} --more STEPS`")
        return 0


def _either(first: Callable[[], bool], second: Callable[[], bool]) -> Callable[[], bool]:
    """A stop condition that holds when either holds (both are polled: the budget keeps time)."""

    def either() -> bool:
        """Poll both; True when either says stop."""
        return bool(second()) | bool(first())

    return either


def resume_hint(run_dir: Path | str) -> str:
    """How to continue a run, with the launcher it was started with."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if launcher:  # embodied-ppo torchrun ..., with its options
        return f"continue with `{launcher} train --resume {run_dir}`"
    if distributed.launched_by_torchrun():
        n = distributed.launch_world_size()
        return (
            f"continue with `torchrun --nproc_per_node={n} -m embodied_ppo train --resume "
            f"{run_dir}` (with the same torchrun settings)"
        )
    return f"continue with `embodied-ppo train --resume {run_dir}`"
