"""How the update runs: its blocks of the config, compilation, and the run's scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from embodied_ppo.algo.distill_loss import DistillTerm
from embodied_ppo.algo.mirror import Mirror
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
        world, rank: the run's number of processes and this one's rank (its envs are the
            rank-th block of the run's envs).
        mirror: the env's mirror, on the update's device, where `algorithm.symmetry` learns
            from it (None: no symmetry).
        distill: the distillation loss added to PPO's (distill.objective ppo; None: PPO's
            loss alone).
    """

    algo: AlgorithmConfig
    optim: OptimConfig
    compile: bool = False
    reduce: Reduce | None = None
    notes: TextIO | None = None
    world: int = 1
    rank: int = 0
    mirror: Mirror | None = None
    distill: DistillTerm | None = None

    @property
    def minibatch(self) -> int:
        """Transitions per gradient step, of all processes together."""
        per_process = self.algo.minibatch_scope == "per_process"
        return self.algo.minibatch_size * (self.world if per_process else 1)
