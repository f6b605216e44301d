"""What this process may use of the machine."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)
