"""Type aliases that several layers share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


# Sums a tensor over the processes of a distributed run (None where there is one process).
Reduce = Callable[["Tensor"], "Tensor"]
