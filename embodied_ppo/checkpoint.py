"""Run directory layout and checkpoints: data only, loaded with weights_only=True, written atomically."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from embodied_ppo.errors import CheckpointError

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


def save_checkpoint(run_dir: Path, state: dict[str, Any], step: int) -> Path:
    """Write checkpoints/ckpt_<step>.pt and point checkpoints/latest.pt at the same data."""
    ckpt_dir = checkpoints_dir(run_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, **state}
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
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
