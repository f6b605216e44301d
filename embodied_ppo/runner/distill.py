"""Teacher-student distillation: the teachers label every state the student visits with their
mean action, and the student's update learns to output it (behaviour cloning on the student's
own state distribution, as DAgger does).

The trainer keeps the order (docs/design.md, the data flow): before a rollout it tells the
`Distiller` the step (`begin`: whether the teacher drives the envs in the run's first phase,
`distill.teacher_acts_steps`); the collector fills the buffer as in PPO, the student acting (or
the teacher, through `Distiller.env_actions`); `Distiller.label_rollout` labels every stored
state with its teacher's mean action (no sampling noise), and `Distiller.batch` hands the update
the rollout with those labels as its actions; the update (`make_distill_update`: PPO's minibatches, micro-batches,
chunks, processes and gradient step, with `algo.distill_loss` as its loss, over the actor's
parameters) trains the student; then the observation statistics are merged.

With distill.objective ppo (kickstarting) the update is PPO's on the task's reward, the
whole policy trained, and its loss adds the distillation loss weighted by distill.coef (falling
linearly to 0 over distill.coef_decay_steps where given): `Distiller.batch` hands it PPO's batch
with the labels and each step's weight beside it (`algo.distill_loss.KICKSTART_FIELDS`).

The teachers are frozen actors (their own keys and normalizers); a run's checkpoints carry
them, so a resume continues with the very teachers the run began with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

import numpy as np
import torch
from torch import Tensor

from embodied_ppo.algo.batch import BATCH_FIELDS
from embodied_ppo.algo.distill_loss import KICKSTART_FIELDS, DistillLoss
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import Config
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.obs import map_obs, obs_rows
from embodied_ppo.core.types import Reduce
from embodied_ppo.io.checkpoint_state import PolicyWeights, RunCheckpoint, TensorObs
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner import distributed
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.finetune import Updates, make_ppo_updates, trainable_only
from embodied_ppo.runner.teachers import check_teachers, frozen_actor, read_teachers
from embodied_ppo.vecenv.spaces import Obs, SpaceInfo

LABEL_ROWS = 8192  # rows per teacher forward pass when a rollout is labelled

# The update's and the rollout's scalars that say nothing of a distillation.
_NOT_LOGGED = ("losses/approx_kl", "losses/early_stopped", "losses/explained_variance")

# The student's parameters a distillation trains: its actor's but the log-std (the loss is on
# the mean action; the std stays where model.log_std_init put it, the noise the student acts
# with).
_UNTRAINED = ("critic_encoder", "critic_rnn", "critic_backbone", "value_head", "log_std")


def distilled(name: str) -> bool:
    """Whether the student's parameter `name` is trained by the distillation loss."""
    part = name.split(".")[0]
    return part not in _UNTRAINED and part != "log_std_head"


class Distiller:
    """The teachers of a distillation run, the labels they give, and the actions they take in
    the run's first phase.

    Args:
        saved: the teachers a resumed run's checkpoint holds (None: read distill.teachers).
    """

    def __init__(
        self, cfg: Config, info: SpaceInfo, device: torch.device, saved: list[PolicyWeights] | None
    ) -> None:
        d = cfg.distill
        self.weights = saved if saved else read_teachers(cfg, torch.device("cpu"))
        check_teachers(cfg, info, self.weights)
        self.teachers = [frozen_actor(w, device) for w in self.weights]
        self.key = d.teacher_key
        self.acting_steps = d.teacher_acts_steps
        self.teacher_acts = False
        self.cloning = d.objective == "bc"  # else PPO's loss beside the distillation's
        self.coef_start, self.coef_decay = d.coef, d.coef_decay_steps
        self.coef = d.coef  # the distillation loss's weight in the next update (objective ppo)
        self.device = device
        self.labels: Tensor | None = None  # the last rollout's (T*N, A)

    def state(self) -> list[PolicyWeights]:
        """The teachers as a checkpoint keeps them."""
        return self.weights

    def begin(self, global_step: int) -> None:
        """Before the rollout that starts at `global_step`: whether the teacher drives the
        envs in it (the rollouts that start within distill.teacher_acts_steps), and the
        distillation loss's weight in its update (objective ppo)."""
        self.teacher_acts = global_step < self.acting_steps
        self.coef = distill_coef(self.coef_start, self.coef_decay, global_step)

    # ------------------------------------------------------------------ labels
    @torch.no_grad()
    def label(self, obs: TensorObs) -> Tensor:
        """The teachers' mean actions (B, A) for raw observations (B, ...): each row's teacher
        (the one its distill.teacher_key names, else the only one), its deployed action (the
        Gaussian mean, clipped to the action bounds)."""
        rows = obs_rows(obs)
        if len(self.teachers) == 1:
            return self._mean(self.teachers[0], obs, rows)
        assert self.key is not None and isinstance(obs, dict)
        index = self._teacher_index(obs[self.key])
        out: Tensor | None = None
        for i, teacher in enumerate(self.teachers):
            mine = (index == i).nonzero().squeeze(-1)
            if mine.numel() == 0:
                continue
            labels = self._mean(teacher, {k: v[mine] for k, v in obs.items()}, mine.numel())
            if out is None:
                out = labels.new_zeros(rows, labels.shape[-1])
            out[mine] = labels
        assert out is not None
        return out

    def _teacher_index(self, value: Tensor) -> Tensor:
        """Each row's teacher (B,) from the teacher key's value (B, 1); a value that names no
        teacher stops the run in one line."""
        index = value.reshape(-1).round().long()
        bad = (
            (index < 0)
            | (index >= len(self.teachers))
            | (index.to(value.dtype) != value.reshape(-1))
        )
        if bool(bad.any()):
            got = float(value.reshape(-1)[bad.nonzero()[0, 0]])
            raise TrainingError(
                f"distill.teacher_key: an env's {self.key!r} is {got:g}, which names none of "
                f"the {len(self.teachers)} teachers (0 to {len(self.teachers) - 1})"
            )
        return index

    def _mean(self, teacher: ActorCritic, obs: TensorObs, rows: int) -> Tensor:
        """A teacher's deployed action for rows of observations, LABEL_ROWS at a time."""
        parts = [
            teacher.deterministic_action(map_obs(lambda x, i=i: x[i : i + LABEL_ROWS], obs))[0]
            for i in range(0, rows, LABEL_ROWS)
        ]
        return torch.cat(parts)

    def label_rollout(self, buffer: RolloutBuffer) -> None:
        """Label every state of the collected rollout (T*N rows, kept for `batch`)."""
        self.labels = self.label(buffer.flat("obs")["obs"])

    def batch(
        self, buffer: RolloutBuffer, prepare: Callable[[], tuple[dict, dict[str, float]]]
    ) -> tuple[dict, dict[str, float]]:
        """The update's batch of the rollout `label_rollout` labelled, and its scalars. Behaviour
        cloning: its fields as PPO's (flattened T*N), the teachers' labels of its observations
        as the actions. Objective ppo: PPO's batch and scalars (`prepare`: the trainer's
        `prepare_batch`), the labels and each step's weight (KICKSTART_FIELDS) beside them."""
        assert self.labels is not None, "label_rollout first"
        if not self.cloning:
            batch, scalars = prepare()
            teacher_actions, distill_coef = KICKSTART_FIELDS
            batch[teacher_actions] = self.labels
            batch[distill_coef] = self.labels.new_full(self.labels.shape[:1], self.coef)
            return batch, scalars
        batch = buffer.flat(*BATCH_FIELDS)
        batch["actions"] = self.labels
        return batch, {}

    def scalars(self, scalars: dict[str, float]) -> dict[str, float]:
        """An iteration's scalars as a distillation logs them: by behaviour cloning, without
        PPO's approx_kl and early stop and the critic's explained variance (nothing of them is
        trained on), with whether the teacher acted (`charts/teacher_acts`, 1 or 0); beside
        PPO, all of PPO's and the distillation loss's weight (`charts/distill_coef`)."""
        if not self.cloning:
            return scalars | {"charts/distill_coef": self.coef}
        out = {k: v for k, v in scalars.items() if k not in _NOT_LOGGED}
        return out | {"charts/teacher_acts": float(self.teacher_acts)}

    # ------------------------------------------------------------------ the teacher acting
    def env_actions(
        self, obs: Obs | TensorObs, actions: np.ndarray | Tensor
    ) -> np.ndarray | Tensor:
        """The actions the envs receive: the student's `actions`, or, while the teacher acts,
        the teacher's mean actions for `obs` (numpy for host envs, tensors for device envs)."""
        if not self.teacher_acts:
            return actions
        if isinstance(actions, Tensor):
            return self.label(obs).to(actions.dtype)
        tensors = map_obs(lambda x: torch.as_tensor(np.asarray(x), device=self.device), obs)
        return self.label(tensors).cpu().numpy().astype(actions.dtype, copy=False)


def distill_coef(start: float, decay_steps: int, global_step: int) -> float:
    """The distillation loss's weight beside PPO's at `global_step`: `start`, falling linearly
    to 0 over `decay_steps` env steps (0: constant)."""
    if decay_steps == 0:
        return start
    return start * max(0.0, 1.0 - global_step / decay_steps)


def make_distiller(
    cfg: Config, info: SpaceInfo, device: torch.device, saved: RunCheckpoint | None
) -> Distiller | None:
    """A distillation run's Distiller, with the teachers of the checkpoint it resumes from
    (None where distill.teachers is empty: PPO)."""
    if not cfg.distill.teachers:
        return None
    return Distiller(cfg, info, device, None if saved is None else saved.teachers)


def make_updates(
    cfg: Config,
    policy: ActorCritic,
    generator: torch.Generator,
    reference: ActorCritic | None,
    *,
    reduce: Reduce | None,
    notes: TextIO | None,
) -> Updates:
    """The updates of a run: a distillation's by behaviour cloning (`make_distill_update`), else
    PPO's (with the distillation loss beside it, distill.objective ppo), after a critic warm-up
    where finetune asks for one (`finetune.make_ppo_updates`)."""
    if cfg.distill.teachers and cfg.distill.objective == "bc":
        return Updates(make_distill_update(cfg, policy, generator, reduce=reduce, notes=notes))
    return make_ppo_updates(cfg, policy, generator, reference, reduce=reduce, notes=notes)


def make_distill_update(
    cfg: Config,
    policy: ActorCritic,
    generator: torch.Generator,
    *,
    reduce: Reduce | None,
    notes: TextIO | None,
) -> PPOUpdate:
    """The student's update: PPO's epochs, minibatches, recurrent chunks and processes with the
    distillation loss, over the parameters that make the student's mean action."""
    a = cfg.algorithm
    settings = UpdateSettings(
        a,
        cfg.optim,
        compile=cfg.trainer.compile,
        reduce=reduce,
        notes=notes,
        world=distributed.world_size(),
        rank=distributed.rank(),
    )
    loss = DistillLoss(
        policy, cfg.distill.loss, cfg.distill.huber_delta, a.sequence_length or a.rollout_steps
    )
    with trainable_only(policy, distilled):
        return PPOUpdate(policy, generator, settings, loss=loss)
