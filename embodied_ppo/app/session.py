"""A run ready to train: its config checked, its directory created or opened, locked."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TextIO

from embodied_ppo.app.factories import record_registered_env
from embodied_ppo.app.results import Callback, Run, TrainResult
from embodied_ppo.config.building import from_dict
from embodied_ppo.config.loading import apply_overrides, load_config
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.errors import ConfigError, QuietError, UserError
from embodied_ppo.core.system import elastic_restart
from embodied_ppo.core.types import ConfigDict
from embodied_ppo.io.lock import RunLock
from embodied_ppo.io.run_dir import create_run_dir, default_run_dir, open_resume, run_dir_of_target
from embodied_ppo.runner import distributed
from embodied_ppo.runner.preflight import check_run
from embodied_ppo.runner.trainer import Trainer


def say(*args: Any, **kwargs: Any) -> None:
    """print, on the first process of a distributed run only."""
    if distributed.launch_rank() == 0:
        print(*args, **kwargs)


def _config(
    config: str | Path | ConfigDict | Config, overrides: list[str], run_dir: str | Path | None
) -> tuple[Config, str]:
    """The checked Config of `config` with `overrides` (and run_dir), and the run's name."""
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
        cfg = with_values(cfg, trainer__run_dir=str(run_dir))
    return cfg, name


def _restarted_run(
    config: str | Path | ConfigDict | Config, overrides: list[str], run_dir: str | Path | None
) -> Path | None:
    """The run directory that processes restarted by torchrun's elastic agent continue (the one
    their first start created), or None where that start made none."""
    cfg, name = _config(config, overrides, run_dir)
    t = cfg.trainer
    target = Path(t.run_dir) if t.run_dir else default_run_dir(name, t.seed)
    return target if (target / "config.yaml").is_file() else None


def _new_run(cfg: Config, name: str) -> tuple[Config, Path, bool]:
    """Create the run directory; under torchrun process 0 does and tells the others."""

    def checked_run_dir(cfg: Config) -> tuple[Config, Path, bool]:
        """`cfg` checked against its environment and machine, then its directory created."""
        check_run(cfg)  # unknown ids, bad spaces or kwargs, no device: before any file
        return create_run_dir(record_registered_env(cfg), name)

    if not distributed.launched_by_torchrun():
        return checked_run_dir(cfg)
    distributed.init(cfg.trainer.device, cfg.trainer.dist_backend, cfg.trainer.dist_timeout)
    outcome: tuple[str | None, str | None] = (None, None)
    created = False
    if distributed.is_main():
        try:
            cfg, run_dir, created = checked_run_dir(cfg)
            outcome = (str(run_dir), None)
        except UserError as exc:
            outcome = (None, str(exc))
    run_dir_text, error = distributed.broadcast_object(outcome)
    if error is not None:
        if distributed.is_main():
            raise ConfigError(error)
        raise QuietError(error)  # already reported by process 0
    cfg = with_values(cfg, trainer__run_dir=run_dir_text)
    return cfg, Path(run_dir_text), created


def _lock(run_dir: Path) -> AbstractContextManager[RunLock | None]:
    """The run directory's lock (process 0 of a distributed run), or nothing to hold."""
    # One process of a distributed run writes; it holds the lock for all of them.
    return RunLock(run_dir) if distributed.launch_rank() == 0 else nullcontext()


@contextmanager
def _session(
    config: str | Path | ConfigDict | Config | None,
    overrides: Sequence[str] | None,
    run_dir: str | Path | None,
    resume: str | Path | None,
    use_intact: bool,
    progress: TextIO | None,
    *,
    more_steps: int | None = None,
) -> Iterator[Trainer | TrainResult]:
    """A run ready to train (its Trainer), with its directory locked; or, for a resumed run
    that has already reached trainer.total_steps, its TrainResult. `more_steps`, with
    `resume`: train that many steps past the checkpoint."""
    overrides = list(overrides or [])
    if resume is None and config is not None and elastic_restart():
        restarted = _restarted_run(config, overrides, run_dir)
        if restarted is not None:
            say(
                f"torchrun restarted the run's processes (restart {elastic_restart()}): "
                f"resuming {restarted} from its latest checkpoint"
            )
            resume, overrides, use_intact = restarted, [], True
    if resume is not None:
        target = Path(resume)
        run = run_dir_of_target(target)
        with _lock(run) if (run / "config.yaml").is_file() else nullcontext():
            writer = distributed.launch_rank() == 0
            cfg, run, state = open_resume(
                target, overrides, writer=writer, use_intact=use_intact, more_steps=more_steps
            )
            if state is not None and state["global_step"] >= cfg.trainer.total_steps:
                say(
                    f"{run}: already trained to {state['global_step']:,} steps "
                    f"(trainer.total_steps={cfg.trainer.total_steps:,}); train longer with "
                    f"`embodied-ppo train --resume {run} --more STEPS`"
                )
                yield TrainResult(run, {}, state["global_step"], state["iteration"], False, None)
                return
            if state is None:
                say(f"{run}: no checkpoint yet, starting the run from the beginning")
            trainer = Trainer(cfg, run, resume=state, progress_stream=progress)
            if state is not None:
                say(
                    f"resuming {run} at step {trainer.global_step:,} (iteration {trainer.iteration})"
                    f" to {cfg.trainer.total_steps:,} steps"
                )
            if trainer.resume_note:
                say(f"  note: {trainer.resume_note}")
            yield trainer
        return
    if more_steps is not None:
        raise UserError(
            "more_steps: goes with resume=RUN_DIR (a new run takes trainer.total_steps)"
        )
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


def run_training(
    trainer: Trainer, callbacks: Sequence[Callback], stop: Callable[[], bool] | None
) -> TrainResult:
    """Train a session's run to its end (or a stop); returns its TrainResult."""
    view = Run(trainer)

    def on_iteration(scalars: dict[str, float]) -> None:
        """Call every callback; one returning True asks the run to stop."""
        for callback in callbacks:
            if callback(view, scalars):
                view.stop()

    def should_stop() -> bool:
        """Whether a callback or `stop` asked the run to stop."""
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
