"""Observation batches: one array (flat observations) or one array per key (Dict observations).

These helpers work on numpy arrays and torch tensors alike and import neither, so every layer
(environments, buffer, collector, update, export) handles both layouts the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def map_obs(fn: Callable[[T], T], obs: T | dict[str, T]) -> T | dict[str, T]:
    """`fn` applied to the array, or to each key's array (keys kept)."""
    if isinstance(obs, dict):
        return {k: fn(v) for k, v in obs.items()}
    return fn(obs)


def set_obs(dst: Any, index: Any, src: Any) -> None:
    """dst[index] = src, key by key for Dict observations."""
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[index] = src[k]
    else:
        dst[index] = src


def obs_rows(obs: Any) -> int:
    """The leading (batch) size of an observation batch."""
    if isinstance(obs, dict):
        return next(iter(obs.values())).shape[0]
    return obs.shape[0]
