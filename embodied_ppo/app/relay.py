"""Relay training: a run that goes on across short windows of compute and fresh machines.

A window trains for a wall-time budget (`embodied-ppo train ... --for 10m`): the run stops at
the last iteration boundary the budget holds, with a checkpoint, exit status 0 and the command
that continues it. `embodied-ppo pack RUN OUT.tar.gz` puts what the next window needs in one
small archive (the config, the metrics and TensorBoard logs, the newest intact checkpoint);
`tar -xzf OUT.tar.gz -C runs/` unpacks it on the next machine, and
`embodied-ppo train --resume runs/NAME --for 10m` continues it there. On the CPU the relayed
run equals the uninterrupted one bit for bit (docs/reliability.md, relay training).
"""

from __future__ import annotations

import os
import re
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embodied_ppo.core.errors import UserError
from embodied_ppo.io.checkpoint import checkpoints_dir, newest_intact, read_checkpoint

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, what: str = "--for") -> float:
    """Seconds of a duration written with its unit: 90s, 10m, 1.5h (a UserError otherwise)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh])\s*", str(text))
    if match is None:
        raise UserError(f"{what}: got {text!r}; give a duration with its unit, e.g. 90s, 10m, 1.5h")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise UserError(f"{what}: got {text!r}; a duration must be positive")
    return seconds


def seconds_of(value: float | str, what: str) -> float:
    """Seconds of a duration given as a number of seconds or as `parse_duration` reads it."""
    if isinstance(value, str):
        return parse_duration(value, what)
    seconds = float(value)
    if not 0 < seconds < float("inf"):
        raise UserError(f"{what}: got {value!r}; a duration must be a positive number of seconds")
    return seconds


class WallBudget:
    """A stop condition for `Trainer.train`: True at the first iteration boundary where the next
    iteration, as long as the last one took, would end past `seconds` from the start.

    Polled between iterations (the points where a run can be saved whole); the first iteration
    always runs. `clock` (seconds, monotonic) is the wall clock unless a test gives another.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] | None = None) -> None:
        self.seconds = float(seconds)
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self._last_poll: float | None = None
        self.reached = False

    def __call__(self) -> bool:
        now = self.clock()
        previous, self._last_poll = self._last_poll, now
        if previous is not None and not self.reached:
            self.reached = (now - self.start) + (now - previous) > self.seconds
        return self.reached


def describe(seconds: float) -> str:
    """A duration as `--for` takes it (10m, 90s, 1.5h)."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size) == round(seconds / size, 2):
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


# ------------------------------------------------------------------------------------ pack
@dataclass(frozen=True)
class Packed:
    """What `pack_run` wrote: the archive, its members and their bytes, the checkpoint step."""

    path: Path
    members: list[str]
    size: int
    global_step: int


def _is_run_dir(run_dir: Path) -> bool:
    return (run_dir / "config.yaml").is_file() and checkpoints_dir(run_dir).is_dir()


def pack_run(run_dir: str | Path, out: str | Path, *, best: bool = False) -> Packed:
    """Write `out` (.tar.gz): the run directory's top-level files (config.yaml, metrics.jsonl,
    TensorBoard events, evaluation records) and its newest intact checkpoint, as
    checkpoints/ckpt_<step>.pt and checkpoints/latest.pt (one copy of the data); with `best`,
    checkpoints/best.pt too. Videos and older checkpoints stay behind. The archive holds one
    folder named as the run directory. Nothing is written for a directory that is not a run
    of this package or has no intact checkpoint (a UserError)."""
    run_dir, out = Path(run_dir), Path(out)
    if not run_dir.is_dir() or not _is_run_dir(run_dir):
        raise UserError(
            f"pack: {run_dir} is not a run directory of embodied-ppo (no config.yaml and "
            "checkpoints/ in it)"
        )
    found = newest_intact(run_dir)
    latest = checkpoints_dir(run_dir) / "latest.pt"
    if latest.exists():
        try:  # latest.pt may be newer than every ckpt_<step>.pt (a pruned or copied run)
            _, state = read_checkpoint(latest)
            if found is None or int(state["global_step"]) > int(found[1]["global_step"]):
                found = (latest, state)
        except UserError:
            pass
    if found is None:
        raise UserError(f"pack: {run_dir} has no intact checkpoint: there is nothing to resume")
    source, state = found
    step = int(state["global_step"])
    name = run_dir.resolve().name
    files = [
        p
        for p in sorted(run_dir.iterdir())
        if p.is_file() and not p.name.startswith(".")  # the lock, temp files
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    members = []
    try:
        with tarfile.open(tmp, "w:gz") as archive:
            for path in files:
                archive.add(path, arcname=f"{name}/{path.name}", recursive=False)
                members.append(f"{name}/{path.name}")
            ckpt = f"{name}/checkpoints/ckpt_{step}.pt"
            archive.add(source, arcname=ckpt, recursive=False)
            # latest.pt as a link to the same member: the data travels once.
            link = tarfile.TarInfo(f"{name}/checkpoints/latest.pt")
            link.type, link.linkname = tarfile.LNKTYPE, ckpt
            archive.addfile(link)
            members += [ckpt, link.name]
            best_pt = checkpoints_dir(run_dir) / "best.pt"
            if best and best_pt.is_file():
                archive.add(best_pt, arcname=f"{name}/checkpoints/best.pt", recursive=False)
                members.append(f"{name}/checkpoints/best.pt")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return Packed(out, members, out.stat().st_size, step)


def pack_command(run_dir: str, out: str, best: bool = False) -> int:
    """`embodied-ppo pack RUN OUT.tar.gz [--best]`: write the archive, say how to continue."""
    if not str(out).endswith((".tar.gz", ".tgz")):
        raise UserError(f"pack: got {out!r}; the archive is a .tar.gz (e.g. run.tar.gz)")
    packed = pack_run(run_dir, out, best=best)
    name = packed.members[0].split("/")[0]
    print(
        f"wrote {packed.path} ({len(packed.members)} files, {packed.size / 2**20:.1f} MiB; "
        f"checkpoint at step {packed.global_step:,})"
    )
    print(
        f"continue elsewhere: tar -xzf {packed.path.name} -C runs/ && "
        f"embodied-ppo train --resume runs/{name}"
    )
    return 0
