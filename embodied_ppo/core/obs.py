"""Observation batches: one array (flat observations) or one array per key (Dict observations).

These helpers work on numpy arrays and torch tensors alike and import neither, so every layer
(environments, buffer, collector, update, export) handles both layouts the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

T = TypeVar("T")


class Shaped(Protocol):
    """An array or a tensor, as far as these helpers read it: something with a shape."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes of its dimensions, the batch first."""
        ...


def map_obs(fn: Callable[[T], T], obs: T | dict[str, T]) -> T | dict[str, T]:
    """`fn` applied to the array, or to each key's array (keys kept)."""
    if isinstance(obs, dict):
        return {k: fn(v) for k, v in obs.items()}
    return fn(obs)


def set_obs(dst: T | dict[str, T], index: int, src: T | Mapping[str, T]) -> None:
    """dst[index] = src, key by key for Dict observations."""
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[index] = src[k]
    else:
        dst[index] = src


def obs_rows(obs: Shaped | Mapping[str, Shaped]) -> int:
    """The leading (batch) size of an observation batch."""
    if isinstance(obs, dict):
        return next(iter(obs.values())).shape[0]
    return obs.shape[0]
