"""What `embodied_ppo.train` returns, and what its callbacks see of the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_ppo.config.schema import Config

if TYPE_CHECKING:
    from embodied_ppo.model.actor_critic import ActorCritic
    from embodied_ppo.runner.trainer import Trainer


@dataclass
class TrainResult:
    """What `train` returns."""

    run_dir: Path
    metrics: dict[str, float]  # the last iteration's logged scalars
    global_step: int
    iteration: int
    stopped: bool  # stopped early (a callback or a signal), with a checkpoint
    checkpoint: Path | None  # the last checkpoint written


class Run:
    """What a callback sees of the run it is called from (read only, but for `stop`)."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self.stop_requested = False

    @property
    def run_dir(self) -> Path:
        return self._trainer.run_dir

    @property
    def config(self) -> Config:
        return self._trainer.cfg

    @property
    def global_step(self) -> int:
        return self._trainer.global_step

    @property
    def iteration(self) -> int:
        return self._trainer.iteration

    @property
    def policy(self) -> ActorCritic:
        """The training module (do not modify it: export it, evaluate it)."""
        return self._trainer.policy

    def stop(self) -> None:
        """Stop gracefully: the run writes a checkpoint and `train` returns (stopped=True)."""
        self.stop_requested = True


# A callback: called after every iteration with the run and that iteration's logged scalars
# (TensorBoard tags: "charts/episodic_return", "losses/approx_kl", ...); returning True (or
# calling run.stop()) stops the run gracefully.
Callback = Callable[[Run, dict[str, float]], bool | None]
