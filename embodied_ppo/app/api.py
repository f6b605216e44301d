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

import io
import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from embodied_ppo.app.evaluate import evaluate_command
from embodied_ppo.app.export import ExportResult, export_policy
from embodied_ppo.app.factories import bind_env, bind_env_to_run
from embodied_ppo.app.plot import plot_runs
from embodied_ppo.app.relay import WallBudget, seconds_of
from embodied_ppo.app.results import Callback, TrainResult
from embodied_ppo.app.session import _session, run_training
from embodied_ppo.config.schema import Config
from embodied_ppo.core.types import ConfigDict, JSONDict
from embodied_ppo.io.render import configure_headless_gl


def train(
    config: str | Path | ConfigDict | Config | None = None,
    overrides: Sequence[str] | None = None,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    *,
    env: object | None = None,
    resume: str | Path | None = None,
    more_steps: int | None = None,
    use_intact: bool = False,
    stop: Callable[[], bool] | None = None,
    progress: TextIO | None = None,
    wall_time: float | str | None = None,
) -> TrainResult:
    """Train a policy; returns the run directory and the last iteration's metrics.

    Args:
        config: a YAML path, a dict of blocks, or a Config (ignored with `resume`).
        overrides: dotted KEY.PATH=VALUE overrides, as on the command line.
        run_dir: where the run goes (else trainer.run_dir, else runs/<name>-seed<seed>-<time>);
            it must not exist or be empty.
        callbacks: called after every iteration (see `Callback`); one returning True stops the
            run gracefully (checkpoint written, `stopped` in the result).
        env: the environment, in place of the config's env.id: an id, or a factory (an Env
            class, or a function returning an Env or a SAME_STEP-autoreset vector env of
            env.num_envs; env.kwargs are its arguments), which the run
            records as env.entry_point (`module:name`). With `resume`, the factory of the run's
            env again, for a factory another process cannot import (a lambda, one defined in
            the script). A dict config may name the factory as its env.id instead.
        resume: a run directory (or one of its checkpoints) to continue instead; `overrides`
            may then change only how long, where and how it runs (trainer.total_steps, ...).
        more_steps: with `resume`, train this many env steps past the checkpoint (SB3's second
            `learn()`); a linear learning-rate schedule then does what
            optim.schedule_extension says.
        use_intact: on resume, when latest.pt is unreadable, continue from the newest intact
            checkpoint (else that is an error naming it).
        stop: polled between iterations; True stops gracefully (the command's signal handler).
        progress: where the progress line goes (default stdout).
        wall_time: seconds (or "10m", "90s", "1.5h") to train before stopping at the last
            iteration boundary they hold, with a checkpoint (`stopped` in the result; relay
            training, docs/reliability.md); `resume` continues it.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # An env worker process starts by importing the main module (forkserver, spawn): a
        # script that trains at import would train again in each worker.
        raise RuntimeError(
            "embodied_ppo.train() was called while an env worker process imported the main "
            'script: call it under `if __name__ == "__main__":`'
        )
    configure_headless_gl()  # before any MuJoCo import or OpenGL context (headless)
    if resume is not None:
        bind_env_to_run(resume, env)
    else:
        config, overrides = bind_env(config, list(overrides or []), env)
    with _session(
        config, overrides, run_dir, resume, use_intact, progress, more_steps=more_steps
    ) as session:
        if isinstance(session, TrainResult):
            return session
        if wall_time is not None:
            budget = WallBudget(seconds_of(wall_time, "wall_time"))
            outer = stop
            stop = budget if outer is None else (lambda: bool(budget()) | bool(outer()))
        return run_training(session, callbacks, stop)


def evaluate(
    source: str | Path,
    episodes: int = 10,
    *,
    deterministic: bool = True,
    seed: int | None = None,
    device: str = "cpu",
    video: str | Path | bool | None = None,
    json_path: str | Path | None = None,
    verbose: bool = False,
    overrides: Sequence[str] = (),
    sweeps: Sequence[str] = (),
    env: object | None = None,
    use_intact: bool = False,
) -> JSONDict:
    """Run evaluation episodes of a run directory's (or checkpoint's) policy, as the `eval`
    command does (eval.json written beside it); returns its summary: mean_return, std_return,
    success_rate, every episode's return, length and seed, the video path.

    Args:
        video: True for the default path (RUN_DIR/videos/...), or an mp4 path.
        verbose: print each episode, as the command does.
        overrides: `env.kwargs.KEY=VALUE` conditions to evaluate under instead of the run's.
        sweeps: `env.kwargs.KEY=[v1, v2]`: the episodes again under each value (`sweep`).
        env: the factory that made the run's env, again (needed where the run records one
            that this process cannot import: a lambda, a function of the training script).
        use_intact: where a run directory's latest.pt is unreadable, evaluate its newest
            intact checkpoint (else the error names it).
    """
    configure_headless_gl()  # before any MuJoCo import or OpenGL context (headless)
    bind_env_to_run(source, env)
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
        use_intact=use_intact,
    )


def export(
    source: str | Path,
    format: str = "torchscript",
    out: str | Path | None = None,
    use_intact: bool = False,
) -> ExportResult:
    """Write a run's (or checkpoint's) deployable policy as TorchScript or ONNX, as the
    `export` command does, with a JSON of shapes, bounds and provenance beside it.

    Args:
        source: a run directory (its checkpoints/latest.pt) or a checkpoint file.
        format: "torchscript" (what libtorch loads) or "onnx" (needs `.[onnx]`).
        out: the file to write; default RUN_DIR/exported/policy-<step>.pt (or .onnx).
        use_intact: where a run directory's latest.pt is unreadable, export its newest intact
            checkpoint (else the error names it).

    Returns:
        ExportResult(path, metadata_path, metadata).
    """
    return export_policy(source, format, out, use_intact)


def plot(
    runs: Sequence[str | Path],
    out: str | Path = "curves.png",
    smooth: int = 1,
    title: str | None = None,
) -> Path:
    """Draw the learning curves of run directories into a PNG, as the `plot` command does
    (needs `.[plot]`); runs that differ only in their seed are drawn as one mean with a band.

    Returns:
        The PNG's path.
    """
    return plot_runs([str(r) for r in runs], str(out), smooth=smooth, title=title)
