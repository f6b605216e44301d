"""Checkpoints are data, not code: tensors and plain values, loaded with `torch.load(..., weights_only=True)`, written atomically (temp file, fsync, rename), so a kill at any moment leaves the last good checkpoint intact."""

from __future__ import annotations

import io
import os
import pickle
import re
import warnings
from pathlib import Path

import torch

from embodied_ppo.core.errors import CheckpointError
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.io.files import _fsync_dir, atomic_write_bytes

FORMAT = "embodied-ppo/checkpoint"


FORMAT_VERSION = 1


def checkpoints_dir(run_dir: Path) -> Path:
    """RUN_DIR/checkpoints, where every checkpoint of a run goes."""
    return Path(run_dir) / "checkpoints"


def _serialize(state: CheckpointState) -> bytes:
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, **state}, buffer)
    return buffer.getvalue()


def write_checkpoint(path: Path, state: CheckpointState) -> None:
    """A checkpoint in the standard format at `path` (e.g. best.pt), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, _serialize(state))


def save_checkpoint(run_dir: Path, state: CheckpointState, step: int) -> Path:
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


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> CheckpointState:
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


def read_checkpoint(path: str | Path) -> tuple[Path, CheckpointState]:
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


def intact_checkpoints(run_dir: Path) -> list[Path]:
    """The run's ckpt_<step>.pt files, newest first (unread: see newest_intact)."""
    found = [p for p in checkpoints_dir(run_dir).glob("ckpt_*.pt") if _step_of(p.name) >= 0]
    return sorted(found, key=lambda p: _step_of(p.name), reverse=True)


def newest_intact(run_dir: Path) -> tuple[Path, CheckpointState] | None:
    """The newest ckpt_<step>.pt that loads, and its contents (None if none does)."""
    for path in intact_checkpoints(run_dir):
        try:
            return path, load_checkpoint(path)
        except CheckpointError:
            continue
    return None


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


def read_checkpoint_or_intact(
    source: str | Path, use_intact: bool = False, command: str | None = None
) -> tuple[Path, CheckpointState]:
    """The checkpoint `source` names (a file, or a run directory's latest.pt), loaded. Where a
    run directory's latest.pt is unreadable and an older checkpoint of the run is intact: that
    one with `use_intact`, else a CheckpointError naming it (and, for the `embodied-ppo
    <command>` that reads it, the command that takes it and the flag)."""
    try:
        return read_checkpoint(source)
    except CheckpointError as exc:
        run_dir = Path(source)
        if not run_dir.is_dir() or not (checkpoints_dir(run_dir) / "latest.pt").exists():
            raise
        intact = newest_intact(run_dir)
        if intact is None:
            raise CheckpointError(f"{exc}; no other checkpoint of this run is readable") from None
        if not use_intact:
            how = (
                "load it by that path"
                if command is None
                else f"`embodied-ppo {command} {intact[0]}` takes it (or add --use-intact; "
                "use_intact=True from Python)"
            )
            raise CheckpointError(f"{exc}; the newest intact one is {intact[0]}: {how}") from None
        return intact
