"""How the update runs: its blocks of the config, compilation, and the run's scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig
from embodied_ppo.core.types import Reduce


@dataclass(frozen=True)
class UpdateSettings:
    """How the update runs.

    Attributes:
        algo, optim: the config's `algorithm:` and `optim:` blocks.
        compile: compile the gradient step (see `gradient_step`).
        reduce: sums a tensor over the processes of a distributed run; None in one process.
        notes: where one-off notes go (e.g. the step running eagerly).
    """

    algo: AlgorithmConfig
    optim: OptimConfig
    compile: bool = False
    reduce: Reduce | None = None
    notes: TextIO | None = None
