"""The distillation loss of one minibatch: the student policy's mean action against the
teacher's mean action on the same states (behaviour cloning on the states the student visits),
as a function of the student's parameters, for the same gradient step PPO's loss runs through
(`gradient_step.GradientStep`).

The minibatch has the fields of PPO's (`update.MINIBATCH_FIELDS`): its `actions` are the
teacher's mean actions (the targets); the others but a recurrent student's stored states and
episode starts are not read. The loss is a weighted sum over the steps of the error averaged
over the action's dimensions, the weights those of a token-mean (`minibatches.
aggregation_weights`): so micro-batches and processes add up to the minibatch's loss and
gradient (docs/design.md, rules 3 and 7), and with equal weights it is torch's `mse_loss` (or
`huber_loss`) of the minibatch's means and targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from torch import Tensor
from torch.func import functional_call

from embodied_ppo.algo.minibatches import chunks_time_major
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import DiagGaussian

# The batch fields of the distillation loss beside PPO's (distill.objective ppo), after every
# other field of a minibatch: the teachers' mean actions and each step's weight of the loss.
KICKSTART_FIELDS = ("teacher_actions", "distill_coef")


@dataclass(frozen=True)
class DistillTerm:
    """The distillation loss added to PPO's (distill.objective ppo, kickstarting): its error
    (`action_error`'s `kind` and `delta`); its weight comes with the batch, one per step
    (KICKSTART_FIELDS), so that a schedule changes no compiled graph."""

    kind: Literal["mse", "huber"]
    delta: float

    def error(self, dist: DiagGaussian, targets: Tensor) -> Tensor:
        """Each row's error (B,) of `dist`'s mean action against the teachers' `targets`."""
        return action_error(dist.mean, targets, self.kind, self.delta)


# The metrics of a step, in the order of its vector: the step reads "loss" and "approx_kl" (0
# here: the update is not measured against the policy that collected the rollout).
DISTILL_METRICS = ["loss", "approx_kl", "distill_loss"]


def action_error(
    mean: Tensor, target: Tensor, kind: Literal["mse", "huber"], delta: float
) -> Tensor:
    """The error of each step (B,): squared or huber (quadratic up to `delta`, linear beyond),
    averaged over the action dimensions of mean and target (B, A)."""
    diff = mean - target
    if kind == "mse":
        return diff.square().mean(dim=-1)
    size = diff.abs()
    quadratic = 0.5 * diff.square()
    linear = delta * (size - 0.5 * delta)
    return torch.where(size <= delta, quadratic, linear).mean(dim=-1)


class DistillLoss:
    """The distillation loss of the student `policy`: `action_error` of its mean actions
    against the minibatch's targets, weighted per step.

    Args:
        kind, delta: distill.loss and distill.huber_delta.
        sequence_length: a recurrent student's chunk length (its rows are chunks of that many
            steps of one env, in order); 0 for a feed-forward student.
    """

    def __init__(
        self,
        policy: ActorCritic,
        kind: Literal["mse", "huber"],
        delta: float,
        sequence_length: int = 0,
    ) -> None:
        if not policy.is_gaussian:
            raise ValueError("distillation learns a Gaussian policy's mean action")
        self.policy, self.kind, self.delta = policy, kind, delta
        self.names = list(DISTILL_METRICS)
        self.seq_len = sequence_length if policy.state_size else 0

    def __call__(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The loss of minibatch `mb` (PPO's fields, the targets as its actions) with per-step
        `weights` (B,), as a function of the student's `params` and `buffers`; and its metrics
        vector (`names`)."""
        obs, targets = mb[0], mb[1]
        if self.seq_len:
            # Rows are C chunks of L steps; the core runs time-major from each chunk's stored
            # first state, and targets and weights follow it into that order.
            states, starts = mb[6], mb[7]
            L = self.seq_len
            C = weights.shape[0] // L

            time_major = partial(chunks_time_major, length=L)

            seq_obs = time_major(obs) if isinstance(obs, Tensor) else {
                k: time_major(v) for k, v in obs.items()
            }  # fmt: skip
            state0 = states.reshape(C, L, -1)[:, 0]
            dist, _ = functional_call(
                self.policy, (params, buffers), (seq_obs, state0, time_major(starts))
            )
            targets = time_major(targets).reshape(C * L, -1)
            weights = time_major(weights).reshape(C * L)
        else:
            dist, _ = functional_call(self.policy, (params, buffers), (obs,))
        assert isinstance(dist, DiagGaussian)
        error = action_error(dist.mean, targets, self.kind, self.delta)  # (B,)
        loss = (error * weights).sum()
        done = loss.detach()
        return loss, torch.stack([done, torch.zeros_like(done), done])
