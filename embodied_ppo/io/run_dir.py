"""Run directories: creating one (config.yaml first), and opening one to resume."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from embodied_ppo.config.building import from_dict, upgrade
from embodied_ppo.config.loading import apply_overrides, dump_yaml, load_yaml
from embodied_ppo.config.resume import _learning_keys, check_more_steps, check_resume_overrides
from embodied_ppo.config.schema import Config, with_values
from embodied_ppo.core.errors import CheckpointError, ConfigError, UserError
from embodied_ppo.core.system import elastic_run_id
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.io.checkpoint import (
    checkpoints_dir,
    load_checkpoint,
    newest_intact,
    remove_stale_temp_files,
)
from embodied_ppo.io.files import atomic_write_bytes


# ------------------------------------------------------------------------------ run directories
def default_run_dir(name: str, seed: int) -> Path:
    """runs/<name>-seed<seed>-<date>-<time>; under a torchrun job with an id,
    runs/<name>-seed<seed>-<job id>, the same when torchrun restarts the job's processes."""
    job = elastic_run_id()
    stamp = job if job is not None else time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-seed{seed}-{stamp}"


def create_run_dir(cfg: Config, name: str) -> tuple[Config, Path, bool]:
    """Create the run directory of a checked `cfg` with config.yaml (the resolved config,
    trainer.run_dir filled in); the caller checks the config against its environment first.

    Returns (config, run directory, whether the directory was created here: a failing start may
    remove it again).
    """
    t = cfg.trainer
    run_dir = Path(t.run_dir) if t.run_dir else default_run_dir(name, t.seed)
    if run_dir.is_dir() and not (run_dir / "config.yaml").exists():
        # A start killed while writing config.yaml leaves only its temp file: not a run yet.
        for leftover in run_dir.glob(".config.yaml.*.tmp"):
            leftover.unlink(missing_ok=True)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(
            f"trainer.run_dir: {str(run_dir)!r} is a file, not a directory; choose a new or "
            "empty directory"
        )
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(
            f"trainer.run_dir: {str(run_dir)!r} already exists; continue it with "
            f"`embodied-ppo train --resume {run_dir}` or choose another trainer.run_dir"
        )
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"trainer.run_dir: cannot create {str(run_dir)!r}: {exc.strerror}"
        ) from None
    cfg = with_values(cfg, trainer__run_dir=str(run_dir))
    try:
        atomic_write_bytes(run_dir / "config.yaml", dump_yaml(cfg).encode())
    except OSError as exc:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise ConfigError(
            f"trainer.run_dir: cannot write to {str(run_dir)!r}: {exc.strerror}"
        ) from None
    return cfg, run_dir, created


def run_dir_of_target(target: Path) -> Path:
    """The run directory of a --resume target: a run directory, or a checkpoint file in one."""
    if target.suffix == ".pt" or target.is_file():
        return target.parent.parent if target.parent.name == "checkpoints" else target.parent
    return target


def open_resume(
    target: str | Path,
    overrides: list[str],
    writer: bool = True,
    use_intact: bool = False,
    *,
    more_steps: int | None = None,
) -> tuple[Config, Path, CheckpointState | None]:
    """Check that a run can resume with `overrides` and load the checkpoint it resumes from.

    `target` is a run directory (its checkpoints/latest.pt) or one of its checkpoint files.
    When latest.pt is unreadable, the newest intact ckpt_<step>.pt is named in the error, or
    used with `use_intact`. `more_steps` sets trainer.total_steps to the checkpoint's step plus
    that many. Returns (config, run directory, checkpoint or None when the run stopped before
    its first checkpoint: it then starts over). `writer` (the one process of a distributed run
    that writes) removes the temp files a killed writer left and records the overrides in
    config.yaml.
    """
    target = Path(target)
    run_dir = run_dir_of_target(target)
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        raise UserError(
            f"--resume {target}: not a run directory (no config.yaml) nor a checkpoint in one"
        )
    check_resume_overrides(overrides)
    check_more_steps(more_steps, overrides)
    saved = upgrade(load_yaml(config_file))
    cfg = from_dict(apply_overrides(saved, overrides))
    ckpt_dir = checkpoints_dir(run_dir)
    state = None
    if target != run_dir:
        state = load_checkpoint(target)
    elif (ckpt_dir / "latest.pt").exists() or any(ckpt_dir.glob("ckpt_*.pt")):
        try:
            state = load_checkpoint(run_dir)
        except CheckpointError as exc:
            intact = newest_intact(run_dir)
            if intact is None or not use_intact:
                offer = (
                    f"; the newest intact one is {intact[0]}: resume from it with "
                    f"`--resume {intact[0]}` (or add --use-intact)"
                    if intact is not None
                    else "; no other checkpoint of this run is readable"
                )
                raise CheckpointError(f"{exc}{offer}") from None
            state = intact[1]
    if state is not None:
        ckpt_cfg = state.get("config")
        if not isinstance(ckpt_cfg, dict) or _learning_keys(upgrade(ckpt_cfg)) != _learning_keys(
            from_dict(saved).to_dict()
        ):
            raise UserError(
                f"--resume {target}: the checkpoint was not written by this run's config"
            )
    if more_steps is not None:  # N more steps than the checkpoint holds (all, without one)
        start = 0 if state is None else int(state["global_step"])
        overrides = [*overrides, f"trainer.total_steps={start + more_steps}"]
        cfg = from_dict(apply_overrides(saved, overrides))
    if writer:
        remove_stale_temp_files(run_dir)  # whoever wrote them is gone; loading never reads them
        if overrides:
            atomic_write_bytes(config_file, dump_yaml(cfg).encode())
    return cfg, run_dir, state
