"""A run's state as a checkpoint: what the trainer saves, and how it continues from one.

Everything needed to continue a run exactly (docs/design.md, rule 6): the parameters, the
optimizer, the normalizers and reward scaler, every random generator, the step, the reference
policy, the value normalizer and RND where a run has them, and the environments in the middle
of their episodes; as tensors and plain values (docs/design.md, rule 5).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path

import torch

from embodied_ppo.algo.kl import InRewardKL
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.algo.schedules import Extension, extend_schedule
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import CheckpointError, TrainingError
from embodied_ppo.core.text import first_line
from embodied_ppo.core.types import CheckpointState
from embodied_ppo.io.checkpoint import (
    checkpoints_dir,
    prune_checkpoints,
    save_checkpoint,
    write_checkpoint,
)
from embodied_ppo.io.checkpoint_state import PolicyWeights, RankPart, RunCheckpoint
from embodied_ppo.io.rng import rng_state, set_rng_state
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.spec import PolicySpec
from embodied_ppo.runner import distributed
from embodied_ppo.runner.auxiliary import Auxiliary
from embodied_ppo.runner.distill import Distiller
from embodied_ppo.runner.rollout import RolloutCollector
from embodied_ppo.vecenv.seeding import env_seeds


class RunState:
    """The trainer's checkpointing: its state, saving it, and continuing from it."""

    cfg: Config  # this process's part of the run
    run_config: Config  # the run's, as given
    run_dir: Path
    world: int
    main: bool
    env_offset: int
    policy: ActorCritic
    updater: PPOUpdate
    reward_scaler: RewardScaler
    shuffle: torch.Generator
    reference: ActorCritic | None
    distiller: Distiller | None
    in_reward_kl: InRewardKL | None
    auxiliary: Auxiliary
    collector: RolloutCollector
    global_step: int
    iteration: int
    recent_returns: deque[float]
    extension: Extension | None
    last_checkpoint: Path | None
    saved_iteration: int
    resume_note: str | None

    def state(self) -> RunCheckpoint:
        """Everything needed to continue this run (its plain form: `RunCheckpoint.to_dict`)."""
        reference = None
        if self.reference is not None:
            reference = PolicyWeights(self.reference.spec.to_dict(), self.reference.state_dict())
        auxiliary = self.auxiliary.state()  # value normalization, RND
        return RunCheckpoint(
            config=self.run_config.to_dict(),  # as given: envs of all processes
            model_spec=self.policy.spec.to_dict(),
            model=self.policy.state_dict(),
            optimizer=self.updater.optimizer_state(),
            reward_scaler=self.reward_scaler.state_dict(),
            rng=rng_state(self.shuffle),
            global_step=self.global_step,
            iteration=self.iteration,
            # Where the envs stand mid-episode and what the policy acts on next (exact resume).
            envs=self.collector.state(),
            recent_returns=list(self.recent_returns),
            lr_extension=None if self.extension is None else self.extension.to_dict(),
            kl_coef=None if self.in_reward_kl is None else self.in_reward_kl.coef,
            reference=reference,
            teachers=None if self.distiller is None else self.distiller.state(),
            value_normalizer=auxiliary.get("value_normalizer"),
            rnd=auxiliary.get("rnd"),
        )

    def save(self) -> Path:
        """Write checkpoints/ckpt_<step>.pt and latest.pt (process 0 of a distributed run,
        with every process's own part); returns the checkpoint's path."""
        state = self.state()
        if self.world > 1:
            # What differs between processes travels per rank; process 0 writes the file.
            parts = distributed.gather_objects(state.rank_part().to_dict())
            ranks = [RankPart.from_dict(part) for part in parts]
            state = replace(state, ranks=ranks, world_size=self.world)
        path, error = None, None
        if self.main:
            try:
                path = save_checkpoint(self.run_dir, state.to_dict(), self.global_step)
            except OSError as exc:  # disk full, permissions: stop rather than train unprotected
                error = (
                    f"iteration {self.iteration}: cannot write a checkpoint to "
                    f"{checkpoints_dir(self.run_dir)} ({exc.strerror or exc}); "
                    f"last good checkpoint: {self._last_good()}"
                )
        path, error = distributed.broadcast_object((str(path) if path else None, error))
        if error is not None:
            raise TrainingError(error)
        keep = self.cfg.trainer.keep_checkpoints
        if self.main and keep is not None:
            prune_checkpoints(self.run_dir, keep)
        self.last_checkpoint, self.saved_iteration = Path(path), self.iteration
        return self.last_checkpoint

    def save_best(self, evaluation: dict[str, float]) -> None:
        """Write checkpoints/best.pt: the run state now, with the evaluation that made it best."""
        state = replace(self.state(), evaluation=evaluation)
        write_checkpoint(checkpoints_dir(self.run_dir) / "best.pt", state.to_dict())

    def _last_good(self) -> str:
        return str(self.last_checkpoint) if self.last_checkpoint else "none written yet"

    def restore(self, state: RunCheckpoint) -> None:
        """Continue from a checkpoint of this run (its process's own view of it)."""
        if not same_spec(state.model_spec, self.policy.spec):
            raise CheckpointError(
                "checkpoint was written for a different environment or architecture than this config"
            )
        try:
            self.policy.load_state_dict(state.model)
            self.updater.load_optimizer_state(state.optimizer)
            self.reward_scaler.load_state_dict(state.reward_scaler)
            rng_note = set_rng_state(state.rng, self.shuffle)
            self.auxiliary.restore({"value_normalizer": state.value_normalizer, "rnd": state.rnd})
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"checkpoint does not match this run: {first_line(exc)}"
            ) from None
        self.global_step = state.global_step
        self.iteration = state.iteration
        self.saved_iteration = self.iteration
        latest = checkpoints_dir(self.run_dir) / f"ckpt_{self.global_step}.pt"
        self.last_checkpoint = latest if latest.is_file() else None
        self.recent_returns.extend(state.recent_returns)
        self.extension = Extension.from_dict(state.lr_extension)
        total = self.cfg.trainer.total_steps
        if state.config["trainer"]["total_steps"] != total:  # a new budget from here on
            lr_now = self.updater.lr
            self.extension = extend_schedule(
                self.cfg.optim, self.global_step, lr_now, total, self.extension
            )
        # The envs where they stood mid-episode; or, where that cannot be, fresh episodes
        # seeded from the run seed and the iteration (deterministic, not the uninterrupted run).
        e = self.cfg.env
        fresh = env_seeds(self.cfg.trainer.seed, e.num_envs, self.env_offset, self.iteration)
        reason = self.collector.restore(state.envs, fresh, self.global_step // e.num_envs)
        if reason is not None:
            self.resume_note = f"environments start fresh episodes ({self.resume_note or reason})"
        if rng_note is not None:
            self.resume_note = "; ".join(filter(None, (self.resume_note, rng_note)))


def read_run_checkpoint(
    data: CheckpointState, rank: int, world: int
) -> tuple[RunCheckpoint, str | None]:
    """A loaded checkpoint as process `rank` of `world` continues from it
    (`RunCheckpoint.local_view`), or a CheckpointError naming what it lacks."""
    try:
        state = RunCheckpoint.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint does not match this run: {first_line(exc)}") from None
    return state.local_view(rank, world)


def same_spec(saved: object, spec: PolicySpec) -> bool:
    """Whether a checkpoint's model_spec describes the architecture `spec`."""
    try:
        return isinstance(saved, dict) and PolicySpec.from_dict(saved) == spec
    except (KeyError, TypeError, ValueError):
        return False
