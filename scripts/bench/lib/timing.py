"""Clocks around the calls of a running training, for the profiles (scripts.bench
.profile_collection, scripts.bench.profile_mjlab)."""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable
from typing import Any


def _nothing() -> None:
    """No device to wait for."""


def timed(
    owner: Any, name: str, clock: collections.Counter, key: str, sync: Callable[[], None] = _nothing
) -> None:
    """Wrap `owner.name` (a class or an instance attribute) so that each call adds its seconds
    to clock[key]; `sync` waits for the device before and after it (a GPU's queued work)."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        """The wrapped call, timed."""
        sync()
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            sync()
            clock[key] += time.perf_counter() - start

    setattr(owner, name, wrapper)
