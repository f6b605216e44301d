"""Training and evaluation from Python, and the `train` command built on them.

    import embodied_ppo
    result = embodied_ppo.train("configs/cartpole.yaml", ["trainer.total_steps=20000"],
                                run_dir="runs/cartpole")
    print(result.run_dir, result.metrics["charts/episodic_return"])
    summary = embodied_ppo.evaluate(result.run_dir, episodes=10)

`train` writes exactly the run directory the command writes (config.yaml, metrics.jsonl,
TensorBoard events, checkpoints), so `embodied-ppo train --resume RUN_DIR`, `eval` and `export`
work on it. One writer per run directory: it is locked while a run trains.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from embodied_ppo import distributed
from embodied_ppo.config import Config
from embodied_ppo.errors import ConfigError, UserError

if TYPE_CHECKING:
    from embodied_ppo.modules.actor_critic import ActorCritic
    from embodied_ppo.trainer import Trainer


class QuietError(UserError):
    """An error another process has already printed."""


@dataclass
class TrainResult:
    """What `train` returns."""

    run_dir: Path
    metrics: dict[str, float]  # the last iteration's logged scalars
    global_step: int
    iteration: int
    stopped: bool  # stopped early (a callback or a signal), with a checkpoint
    checkpoint: Path | None  # the last checkpoint written


class Run:
    """What a callback sees of the run it is called from (read only, but for `stop`)."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self.stop_requested = False

    @property
    def run_dir(self) -> Path:
        return self._trainer.run_dir

    @property
    def config(self) -> Config:
        return self._trainer.cfg

    @property
    def global_step(self) -> int:
        return self._trainer.global_step

    @property
    def iteration(self) -> int:
        return self._trainer.iteration

    @property
    def policy(self) -> ActorCritic:
        """The training module (do not modify it: export it, evaluate it)."""
        return self._trainer.policy

    def stop(self) -> None:
        """Stop gracefully: the run writes a checkpoint and `train` returns (stopped=True)."""
        self.stop_requested = True


# A callback: called after every iteration with the run and that iteration's logged scalars
# (TensorBoard tags: "charts/episodic_return", "losses/approx_kl", ...); returning True (or
# calling run.stop()) stops the run gracefully.
Callback = Callable[[Run, dict[str, float]], bool | None]


def say(*args: Any, **kwargs: Any) -> None:
    """print, on the first process of a distributed run only."""
    if distributed.launch_rank() == 0:
        print(*args, **kwargs)


def _config(
    config: str | Path | dict | Config, overrides: list[str], run_dir: str | Path | None
) -> tuple[Config, str]:
    """The checked Config of `config` with `overrides` (and run_dir), and the run's name."""
    from embodied_ppo.config import apply_overrides, from_dict, load_config

    if isinstance(config, (str, Path)):
        cfg, name = load_config(config, overrides), Path(config).stem
    elif isinstance(config, Config):
        cfg, name = from_dict(apply_overrides(config.to_dict(), overrides)), "run"
    elif isinstance(config, dict):
        cfg, name = from_dict(apply_overrides(copy.deepcopy(config), overrides)), "run"
    else:
        raise UserError(
            f"config: got {type(config).__name__}, expected a YAML path, dict or Config"
        )
    if run_dir is not None:
        cfg.trainer.run_dir = str(run_dir)
    return cfg, name


def _new_run(cfg: Config, name: str) -> tuple[Config, Path, bool]:
    """Create the run directory; under torchrun process 0 does and tells the others."""
    from embodied_ppo.checkpoint import create_run_dir

    if not distributed.launched_by_torchrun():
        return create_run_dir(cfg, name)
    distributed.init(cfg.trainer.device, cfg.trainer.dist_backend, cfg.trainer.dist_timeout)
    outcome: tuple[str | None, str | None] = (None, None)
    created = False
    if distributed.is_main():
        try:
            cfg, run_dir, created = create_run_dir(cfg, name)
            outcome = (str(run_dir), None)
        except UserError as exc:
            outcome = (None, str(exc))
    run_dir_text, error = distributed.broadcast_object(outcome)
    if error is not None:
        if distributed.is_main():
            raise ConfigError(error)
        raise QuietError(error)  # already reported by process 0
    cfg.trainer.run_dir = run_dir_text
    return cfg, Path(run_dir_text), created


def _lock(run_dir: Path) -> Any:
    from embodied_ppo.checkpoint import RunLock

    # One process of a distributed run writes; it holds the lock for all of them.
    return RunLock(run_dir) if distributed.launch_rank() == 0 else nullcontext()


@contextmanager
def _session(
    config: str | Path | dict | Config | None,
    overrides: Sequence[str] | None,
    run_dir: str | Path | None,
    resume: str | Path | None,
    use_intact: bool,
    progress: TextIO | None,
) -> Iterator[Trainer | TrainResult]:
    """A run ready to train (its Trainer), with its directory locked; or, for a resumed run
    that has already reached trainer.total_steps, its TrainResult."""
    from embodied_ppo.checkpoint import open_resume, run_dir_of_target
    from embodied_ppo.trainer import Trainer

    overrides = list(overrides or [])
    if resume is not None:
        target = Path(resume)
        run = run_dir_of_target(target)
        with _lock(run) if (run / "config.yaml").is_file() else nullcontext():
            writer = distributed.launch_rank() == 0
            cfg, run, state = open_resume(target, overrides, writer=writer, use_intact=use_intact)
            if state is not None and state["global_step"] >= cfg.trainer.total_steps:
                say(
                    f"{run}: already trained to {state['global_step']:,} steps "
                    f"(trainer.total_steps={cfg.trainer.total_steps:,})"
                )
                yield TrainResult(run, {}, state["global_step"], state["iteration"], False, None)
                return
            if state is None:
                say(f"{run}: no checkpoint yet, starting the run from the beginning")
            trainer = Trainer(cfg, run, resume=state, progress_stream=progress)
            if state is not None:
                say(
                    f"resuming {run} at step {trainer.global_step:,} (iteration {trainer.iteration})"
                )
            if trainer.resume_note:
                say(f"  note: {trainer.resume_note}")
            yield trainer
        return
    if config is None:
        raise UserError("train: give a config (a YAML path, dict or Config) or resume=RUN_DIR")
    cfg, name = _config(config, overrides, run_dir)
    cfg, run, created = _new_run(cfg, name)
    with _lock(run):
        try:
            trainer = Trainer(cfg, run, progress_stream=progress)
        except BaseException:
            if created:
                shutil.rmtree(run, ignore_errors=True)
            raise
        say(
            f"training {cfg.env.id} for {cfg.trainer.total_steps:,} steps on {trainer.device} "
            f"-> {run}" + (f" ({trainer.world} processes)" if trainer.world > 1 else "")
        )
        say(f"  tensorboard --logdir {run.parent}")
        yield trainer


def train(
    config: str | Path | dict | Config | None = None,
    overrides: Sequence[str] | None = None,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    *,
    resume: str | Path | None = None,
    use_intact: bool = False,
    stop: Callable[[], bool] | None = None,
    progress: TextIO | None = None,
) -> TrainResult:
    """Train a policy; returns the run directory and the last iteration's metrics.

    Args:
        config: a YAML path, a dict of blocks, or a Config (ignored with `resume`).
        overrides: dotted KEY.PATH=VALUE overrides, as on the command line.
        run_dir: where the run goes (else trainer.run_dir, else runs/<name>-seed<seed>-<time>);
            it must not exist or be empty.
        callbacks: called after every iteration (see `Callback`); one returning True stops the
            run gracefully (checkpoint written, `stopped` in the result).
        resume: a run directory (or one of its checkpoints) to continue instead; `overrides`
            may then change only what does not change learning (trainer.total_steps, ...).
        use_intact: on resume, when latest.pt is unreadable, continue from the newest intact
            checkpoint (else that is an error naming it).
        stop: polled between iterations; True stops gracefully (the command's signal handler).
        progress: where the progress line goes (default stdout).
    """
    with _session(config, overrides, run_dir, resume, use_intact, progress) as session:
        if isinstance(session, TrainResult):
            return session
        return _run(session, callbacks, stop)


def _run(
    trainer: Trainer, callbacks: Sequence[Callback], stop: Callable[[], bool] | None
) -> TrainResult:
    view = Run(trainer)

    def on_iteration(scalars: dict[str, float]) -> None:
        for callback in callbacks:
            if callback(view, scalars):
                view.stop()

    def should_stop() -> bool:
        return view.stop_requested or (stop is not None and stop())

    summary = trainer.train(should_stop=should_stop, on_iteration=on_iteration)
    metrics = {k: v for k, v in summary.items() if "/" in k}
    return TrainResult(
        trainer.run_dir,
        metrics,
        trainer.global_step,
        trainer.iteration,
        bool(summary["stopped"]),
        trainer.last_checkpoint,
    )


def evaluate(
    source: str | Path,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
    device: str = "cpu",
    video: str | Path | bool | None = None,
    json_path: str | Path | None = None,
    verbose: bool = False,
    overrides: Sequence[str] = (),
    sweeps: Sequence[str] = (),
) -> dict[str, Any]:
    """Run evaluation episodes of a run directory's (or checkpoint's) policy, as the `eval`
    command does (eval.json written beside it); returns its summary: mean_return, std_return,
    success_rate, every episode's return, length and seed, the video path.

    Args:
        video: True for the default path (RUN_DIR/videos/...), or an mp4 path.
        verbose: print each episode, as the command does.
        overrides: `env.kwargs.KEY=VALUE` conditions to evaluate under instead of the run's.
        sweeps: `env.kwargs.KEY=[v1, v2]`: the episodes again under each value (`sweep`).
    """
    import io

    from embodied_ppo.evaluation import evaluate_command

    video_arg = "" if video is True else (None if video in (None, False) else str(video))
    return evaluate_command(
        str(source),
        episodes=episodes,
        deterministic=deterministic,
        seed=seed,
        device=device,
        video=video_arg,
        json_path=None if json_path is None else str(json_path),
        out=None if verbose else io.StringIO(),
        overrides=list(overrides),
        sweeps=list(sweeps),
    )


# ---------------------------------------------------------------------------------- command
def train_command(
    config_path: str | None, overrides: list[str], resume: str | None, use_intact: bool = False
) -> int:
    """`embodied-ppo train CONFIG [overrides]` or `embodied-ppo train --resume RUN_DIR`."""
    from embodied_ppo.signals import GracefulStop, exit_code

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
            None if resume else config_path, overrides, None, resume, use_intact, None
        ) as session,
    ):
        if isinstance(session, TrainResult):
            return 0  # already trained to trainer.total_steps
        trainer = session
        hint = resume_hint(trainer.run_dir)
        try:
            result = _run(trainer, (), stop)
        except KeyboardInterrupt as exc:  # a second signal: stop at once
            last = trainer.last_checkpoint or "no checkpoint yet"
            say(f"\nstopped at once; last checkpoint: {last}; {hint}", file=sys.stderr)
            return exit_code(getattr(exc, "signum", signal.SIGINT))
        if result.stopped:
            say(
                f"stopped at step {result.global_step:,} (iteration {result.iteration}); "
                f"checkpoint: {result.checkpoint}; {hint}",
                file=sys.stderr,
            )
            return stop.exit_code
        ret = result.metrics.get("charts/episodic_return")
        say(
            f"done: {result.global_step:,} steps"
            + (f", last mean episodic return {ret:.2f}" if ret is not None else "")
        )
        say(f"checkpoint: {result.checkpoint}")
        return 0


def resume_hint(run_dir: Path | str) -> str:
    """How to continue a run, with the launcher it was started with."""
    from embodied_ppo.launch import LAUNCHER_ENV

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
