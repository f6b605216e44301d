"""What this process may use of the machine."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def launched_world_size() -> int:
    """The number of processes torchrun started this one among (WORLD_SIZE; 1 alone)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def default_threads() -> int:
    """The intra-op threads torch starts a process with: OMP_NUM_THREADS where it is a number
    (torchrun sets 1 per process), else every usable core."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) >= 1 else usable_cores()


def elastic_restart() -> int:
    """How many times torchrun's elastic agent has restarted this process's group (0: the
    first start, or not under torchrun)."""
    value = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return int(value) if value.isdigit() else 0


def elastic_run_id() -> str | None:
    """The id of the torchrun job this process belongs to, the same on every restart (None
    outside torchrun or where the job has none)."""
    value = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return None if value in ("", "none") else value
