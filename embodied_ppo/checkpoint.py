"""The run directory and its checkpoints.

Checkpoints are data, not code (DESIGN Rule 5): tensors and plain values, loaded with
`torch.load(..., weights_only=True)`, written atomically (temp file, fsync, rename) so a kill at
any moment leaves the last good checkpoint intact. This module also creates run directories and
checks a run before it resumes. Loading a policy needs torch only: the config, validation and
the environment layer are imported by the functions that create or resume runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import random
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import torch

from embodied_ppo.errors import CheckpointError, ConfigError, UserError

if TYPE_CHECKING:
    from embodied_ppo.config import Config

FORMAT = "embodied-ppo/checkpoint"
FORMAT_VERSION = 1


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file ordinary permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _serialize(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **state}, buffer)
    return buffer.getvalue()


def write_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """A checkpoint in the standard format at `path` (e.g. best.pt), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, _serialize(state))


def save_checkpoint(run_dir: Path, state: dict[str, Any], step: int) -> Path:
    """Write checkpoints/ckpt_<step>.pt and point checkpoints/latest.pt at the same data."""
    ckpt_dir = checkpoints_dir(run_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    data = _serialize(state)
    path = ckpt_dir / f"ckpt_{step}.pt"
    atomic_write_bytes(path, data)
    _replace_with_link(path, ckpt_dir / "latest.pt", data)
    return path


def _replace_with_link(src: Path, dst: Path, data: bytes) -> None:
    """Atomically make `dst` hold the same bytes as `src` (hard link, or a copy where links fail)."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link")
    try:
        if tmp.exists():
            tmp.unlink()
        os.link(src, tmp)
        os.replace(tmp, dst)
        _fsync_dir(dst.parent)
    except OSError:
        if tmp.exists():
            tmp.unlink()
        atomic_write_bytes(dst, data)


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Delete the temp files a writer killed mid-write left behind; returns what was removed.

    Only call this when no other process writes to `run_dir` (e.g. when resuming it). Loading
    never looks at these files, so leaving them is harmless, only untidy.
    """
    removed = []
    for folder in (Path(run_dir), checkpoints_dir(run_dir)):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            name = path.name
            stale = name.startswith(".") and (name.endswith(".tmp") or name.endswith(".link"))
            if stale and path.is_file():
                try:
                    path.unlink()
                    removed.append(path)
                except OSError:
                    pass
    return removed


def trim_metrics(path: Path, max_step: int) -> int:
    """Keep the records of metrics.jsonl up to global step `max_step`; returns how many were dropped.

    A resumed run repeats the iterations after its checkpoint; without this they would be
    logged twice. A line torn by a kill (not valid JSON) is dropped too.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    lines = data.splitlines()
    keep = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("global_step", 0) <= max_step:
            keep.append(line + b"\n")
    dropped = len(lines) - len(keep)
    if dropped or (data and not data.endswith(b"\n")):
        atomic_write_bytes(path, b"".join(keep))
    return dropped


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a run directory (-> its checkpoints/latest.pt)."""
    path = Path(path)
    if path.is_dir():
        candidate = checkpoints_dir(path) / "latest.pt"
        if not candidate.is_file():
            others = sorted(checkpoints_dir(path).glob("ckpt_*.pt"), key=lambda p: _step_of(p.name))
            hint = f"; to resume from {others[-1].name}, copy it to latest.pt" if others else ""
            raise CheckpointError(f"{path}: no checkpoint found (expected {candidate}){hint}")
        return candidate
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file or run directory")
    return path


def _step_of(name: str) -> int:
    digits = name.removeprefix("ckpt_").removesuffix(".pt")
    return int(digits) if digits.isdigit() else -1


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with weights_only=True; anything else is a one-line CheckpointError."""
    path = resolve_checkpoint(path)
    try:
        with warnings.catch_warnings():  # foreign pickles may warn about their protocol first
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message suggests retrying with weights_only=False: never show that advice.
        code = re.search(r"GLOBAL (\S+)", str(exc))
        if code:
            raise CheckpointError(
                f"{path}: refused to load: it asks to import {code.group(1)}, which could run "
                "code; checkpoints hold tensors and plain data only"
            ) from None
        raise CheckpointError(
            f"{path}: not a readable checkpoint (corrupt, or not a torch file)"
        ) from None
    except Exception as exc:  # any parse failure of an untrusted file is a bad file
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {type(exc).__name__})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an embodied-ppo checkpoint")
    if state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {state.get('format_version')} is not supported (expected {FORMAT_VERSION})"
        )
    return state


def read_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Resolve and load a checkpoint; whatever a foreign file makes the unpickler raise becomes
    a one-line CheckpointError (torch.load on arbitrary bytes can raise KeyError, IndexError,
    UnicodeDecodeError, ... besides the errors load_checkpoint already translates)."""
    ckpt = resolve_checkpoint(path)
    try:
        return ckpt, load_checkpoint(ckpt, map_location="cpu")
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"{ckpt}: not a readable checkpoint (corrupt or foreign: {type(exc).__name__})"
        ) from None


# ------------------------------------------------------------------------------------ RNG state
def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(shuffle: torch.Generator) -> dict[str, Any]:
    """Every RNG a run draws from, as tensors and plain values (checkpoint-safe)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        "shuffle": shuffle.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], shuffle: torch.Generator) -> None:
    """Restore `rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])
    shuffle.set_state(state["shuffle"])
    if (
        "cuda" in state
        and torch.cuda.is_available()
        and len(state["cuda"]) == torch.cuda.device_count()
    ):
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------ run directories
def default_run_dir(name: str, seed: int) -> Path:
    """runs/<name>-seed<seed>-<date>-<time>."""
    return Path("runs") / f"{name}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"


def create_run_dir(cfg: Config, name: str) -> tuple[Config, Path, bool]:
    """Check `cfg` against its environment and the machine, then create its run directory with
    config.yaml (the resolved config, trainer.run_dir filled in).

    Nothing is written unless every check passes. Returns (config, run directory, whether the
    directory was created here: a failing start may remove it again).
    """
    from embodied_ppo.config import dump_yaml
    from embodied_ppo.validate import check_env, resolve_device

    check_env(cfg)  # unknown ids, unsupported spaces and bad kwargs fail here, before any file
    resolve_device(cfg.trainer.device)
    t = cfg.trainer
    run_dir = Path(t.run_dir) if t.run_dir else default_run_dir(name, t.seed)
    if run_dir.is_dir() and not (run_dir / "config.yaml").exists():
        # A start killed while writing config.yaml leaves only its temp file: not a run yet.
        for leftover in run_dir.glob(".config.yaml.*.tmp"):
            leftover.unlink(missing_ok=True)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
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
    cfg.trainer.run_dir = str(run_dir)
    try:
        atomic_write_bytes(run_dir / "config.yaml", dump_yaml(cfg).encode())
    except OSError as exc:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise ConfigError(
            f"trainer.run_dir: cannot write to {str(run_dir)!r}: {exc.strerror}"
        ) from None
    return cfg, run_dir, created


def intact_checkpoints(run_dir: Path) -> list[Path]:
    """The run's ckpt_<step>.pt files, newest first (unread: see newest_intact)."""
    found = [p for p in checkpoints_dir(run_dir).glob("ckpt_*.pt") if _step_of(p.name) >= 0]
    return sorted(found, key=lambda p: _step_of(p.name), reverse=True)


def newest_intact(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest ckpt_<step>.pt that loads, and its contents (None if none does)."""
    for path in intact_checkpoints(run_dir):
        try:
            return path, load_checkpoint(path)
        except CheckpointError:
            continue
    return None


def run_dir_of_target(target: Path) -> Path:
    """The run directory of a --resume target: a run directory, or a checkpoint file in one."""
    if target.suffix == ".pt" or target.is_file():
        return target.parent.parent if target.parent.name == "checkpoints" else target.parent
    return target


def open_resume(
    target: str | Path, overrides: list[str], writer: bool = True, use_intact: bool = False
) -> tuple[Config, Path, dict[str, Any] | None]:
    """Check that a run can resume with `overrides` and load the checkpoint it resumes from.

    `target` is a run directory (its checkpoints/latest.pt) or one of its checkpoint files.
    When latest.pt is unreadable, the newest intact ckpt_<step>.pt is named in the error, or
    used with `use_intact`. Returns (config, run directory, checkpoint or None when the run
    stopped before its first checkpoint: it then starts over). `writer` (the one process of a
    distributed run that writes) removes the temp files a killed writer left and records the
    overrides in config.yaml.
    """
    from embodied_ppo.config import apply_overrides, dump_yaml, from_dict, load_yaml, upgrade
    from embodied_ppo.validate import check_resume_overrides

    target = Path(target)
    run_dir = run_dir_of_target(target)
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        raise UserError(
            f"--resume {target}: not a run directory (no config.yaml) nor a checkpoint in one"
        )
    check_resume_overrides(overrides)
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
    if writer:
        remove_stale_temp_files(run_dir)  # whoever wrote them is gone; loading never reads them
        if overrides:
            atomic_write_bytes(config_file, dump_yaml(cfg).encode())
    return cfg, run_dir, state


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` ckpt_<step>.pt files (latest.pt and best.pt stay)."""
    removed = []
    for path in intact_checkpoints(run_dir)[keep:]:
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


# ---------------------------------------------------------------------------------- run lock
LOCK_NAME = ".lock"


class RunLock:
    """One writer per run directory: an exclusive lock on RUN_DIR/.lock while a run trains.

    The operating system releases the lock when its holder exits, however it exits (kill -9
    included), so a lock left by a dead process is simply taken over; the file names the
    holder (pid, host, start time) for the refusal message. A holder that ends normally removes
    the file, so a finished run directory holds no trace of it, and a refused attempt leaves
    the directory exactly as it found it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._file: TextIO | None = None

    def acquire(self) -> RunLock:
        import fcntl
        import socket

        while True:
            f = open(self.path, "a+")  # noqa: SIM115 (held until release)
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                f.close()
                raise UserError(
                    f"{self.path.parent}: this run is being trained by {holder}; wait for it to "
                    "finish or stop it (Ctrl-C saves a checkpoint), then --resume"
                ) from None
            # A holder that released between our open and our flock has removed the file we
            # locked: lock the file that is at the path now, not an orphan.
            if self._is_at_path(f):
                break
            f.close()
        f.seek(0)
        f.truncate()
        f.write(
            f"process {os.getpid()} on {socket.gethostname()} "
            f"(since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
        )
        f.flush()
        self._file = f
        return self

    def _is_at_path(self, f: TextIO) -> bool:
        try:
            return os.path.samestat(os.fstat(f.fileno()), os.stat(self.path))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._file is not None:
            # Remove the file while still holding the lock, then close (which releases it).
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _learning_keys(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict without the keys that may change on resume (nor trainer.run_dir)."""
    from embodied_ppo.validate import RESUMABLE_KEYS

    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for key in RESUMABLE_KEYS | {"trainer.run_dir"}:
        block, name = key.split(".")
        if isinstance(out.get(block), dict):
            out[block].pop(name, None)
    return out
