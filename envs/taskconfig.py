"""Checks of task keyword arguments (`env.kwargs`): one error naming the key, nothing else.

Every check raises :class:`TaskConfigError`, whose `key` is the dotted path inside `env.kwargs`
(e.g. ``"randomization.friction"``), so a config preflight can print
``env.kwargs.<key>: <message>`` and stop before anything is written.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any


class TaskConfigError(ValueError):
    """A task keyword argument that cannot be used; `str()` is the message alone.

    Attributes:
        key: the dotted path of the argument inside `env.kwargs`.
        message: what was given and what is allowed.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def unknown_names(given: Iterable[str], allowed: Iterable[str], where: str) -> None:
    """Refuse names of `given` that are not in `allowed`, naming the closest allowed one."""
    allowed = list(allowed)
    for name in given:
        if name not in allowed:
            key = f"{where}.{name}" if where else str(name)
            close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}"
            raise TaskConfigError(key, f"unknown term {_fmt(name)}; {hint}")


def mapping(value: Any, key: str) -> dict[str, Any]:
    """`value` as a dict (None: empty), or an error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a mapping of names to values")
    return dict(value)


def number(value: Any, key: str, low: float | None = None, high: float | None = None) -> float:
    """A finite number within [low, high] (either bound may be None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a finite number")
    value = float(value)
    if low is not None and value < low:
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a number >= {low:g}")
    if high is not None and value > high:
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a number <= {high:g}")
    return value


def integer(value: Any, key: str, low: int | None = None, high: int | None = None) -> int:
    """An integer within [low, high]."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise TaskConfigError(key, f"got {_fmt(value)}, expected an integer")
    value = int(value)
    if low is not None and value < low:
        raise TaskConfigError(key, f"got {value}, expected an integer >= {low}")
    if high is not None and value > high:
        raise TaskConfigError(key, f"got {value}, expected an integer <= {high}")
    return value


def value_range(
    value: Any, key: str, low: float | None = None, high: float | None = None
) -> tuple[float, float]:
    """A `[lo, hi]` pair with lo <= hi, both within [low, high] where those are given."""
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
        or not all(math.isfinite(v) for v in value)
    ):
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a range [low, high] of numbers")
    lo, hi = float(value[0]), float(value[1])
    if lo > hi:
        raise TaskConfigError(key, f"got [{lo:g}, {hi:g}]: low > high")
    if (low is not None and lo < low) or (high is not None and hi > high):
        bounds = (
            f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
        )
        raise TaskConfigError(key, f"got [{lo:g}, {hi:g}], allowed within {bounds}")
    return lo, hi


def vector(value: Any, key: str, size: int) -> list[float]:
    """A list of `size` finite numbers."""
    if not isinstance(value, (list, tuple)) or len(value) != size:
        raise TaskConfigError(key, f"got {_fmt(value)}, expected a list of {size} numbers")
    return [number(v, f"{key}[{i}]") for i, v in enumerate(value)]
