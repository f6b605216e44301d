"""The loss of one minibatch as a function of the policy's parameters: the policy's forward
pass (time-major from each chunk's first state for a recurrent policy), the KL to the
reference policy where asked, and `losses.ppo_loss`, with its metrics as one vector."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor
from torch.func import functional_call

from embodied_ppo.algo.distill_loss import DistillTerm
from embodied_ppo.algo.kl import kl_estimate
from embodied_ppo.algo.losses import ppo_loss
from embodied_ppo.algo.minibatches import chunks_time_major
from embodied_ppo.algo.mirror import Mirror
from embodied_ppo.algo.symmetry import (
    Pairing,
    action_means,
    chunk_pairing,
    flat_pairing,
    join_obs,
    mirror_loss,
    mirror_loss_of,
)
from embodied_ppo.config.schema import AlgorithmConfig
from embodied_ppo.core.obs import map_obs
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import DiagGaussian, Distribution


def metric_names(
    algo: AlgorithmConfig, gaussian: bool, mirror: bool = False, distill: bool = False
) -> list[str]:
    """The metrics of one (micro-)batch, in the order of the vectors the step returns
    (`mirror`: the update learns from the env's mirror, and measures the policy's asymmetry;
    `distill`: the teachers' distillation loss is added to PPO's)."""
    names = ["loss", "policy_loss", "entropy", "approx_kl", "clipfrac", "dual_clipfrac"]
    if algo.loss_type == "actor_critic":
        names += ["value_loss", "value_clipfrac"]
    if algo.use_kl_loss:
        names.append("kl_loss")
    if gaussian:
        names.append("std")
    if mirror:
        names.append("mirror_loss")
    if distill:
        names.append("distill_loss")
    return names


class MinibatchLoss:
    """The minibatch loss of `policy` with the `algorithm:` block's terms.

    Args:
        reference: frozen reference policy of the KL loss (used when algo.use_kl_loss).
        mirror: the env's mirror, where the update learns from it (`algorithm.symmetry`):
            every row is run beside its mirror (`_symmetric`).
        distill: the distillation loss added to PPO's (distill.objective ppo); its fields
            (`distill_loss.KICKSTART_FIELDS`) are the minibatch's last two.
    """

    def __init__(
        self,
        policy: ActorCritic,
        algo: AlgorithmConfig,
        reference: ActorCritic | None = None,
        mirror: Mirror | None = None,
        distill: DistillTerm | None = None,
    ) -> None:
        self.policy, self.algo = policy, algo
        self.reference = reference if algo.use_kl_loss else None
        self.mirror, self.distill = mirror, distill
        if distill is not None and (mirror is not None and algo.symmetry.augment):
            raise ValueError("the teachers label the collected rows, not their mirrors")
        self.names = metric_names(algo, policy.is_gaussian, mirror is not None, bool(distill))
        # A recurrent policy's minibatch rows are chunks of seq_len steps of one env, in order.
        self.seq_len = (algo.sequence_length or algo.rollout_steps) if policy.state_size else 0

    def __call__(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The loss of minibatch `mb` (its fields in MINIBATCH_FIELDS order) with the
        per-token aggregation `weights`, as a function of the policy's `params` and `buffers`;
        and its metrics vector (`names`)."""
        if self.mirror is not None:
            return self._symmetric(params, buffers, mb, weights)
        dist, value, fields, weights = self._forward(params, buffers, mb, weights)
        loss, metrics = self._ppo(dist, value, mb[0], fields[:5], weights)
        loss = self._with_distill(loss, metrics, dist, fields[5:], weights)
        metrics["loss"] = loss.detach()
        return loss, torch.stack([metrics[n] for n in self.names])

    def _forward(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
    ) -> tuple[Distribution, Tensor, tuple[Tensor, ...], Tensor]:
        """The policy's forward pass over the minibatch's rows: its distribution and values, and
        the rows' actions, old log-probs, old values, advantages and returns (then the
        distillation's fields, where it has them) and the `weights`, all in the forward's row
        order (time-major for a recurrent policy)."""
        obs, *fields = mb[:6]
        if self.distill is not None:
            fields += mb[-2:]
        if not self.seq_len:
            dist, value = functional_call(self.policy, (params, buffers), (obs,))
            return dist, value, tuple(fields), weights
        # Rows are chunks of L steps; the core runs time-major from each chunk's stored first
        # state, so every per-step input goes time-major too (the loss is a weighted sum: its
        # order does not matter, only that all terms agree).
        inputs = self._sequences(obs, mb[6], mb[7])
        dist, value = functional_call(self.policy, (params, buffers), inputs)

        def flat_time_major(x: Tensor) -> Tensor:
            """Rows (C*L, ...) reordered time-major: (L*C, ...)."""
            return chunks_time_major(x, self.seq_len).reshape(x.shape)

        fields = tuple(flat_time_major(x) for x in fields)
        return dist, value, fields, flat_time_major(weights)

    def _sequences(
        self, obs: Tensor | dict[str, Tensor], states: Tensor, starts: Tensor
    ) -> tuple[Tensor | dict[str, Tensor], Tensor, Tensor]:
        """A recurrent policy's forward inputs for rows that are chunks of `seq_len` steps: the
        observations and episode starts time-major (L, C, ...), and each chunk's first state."""
        L = self.seq_len
        time_major = partial(chunks_time_major, length=L)
        first = states.reshape(-1, L, states.shape[-1])[:, 0]
        return map_obs(time_major, obs), first, time_major(starts)

    def _symmetric(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The loss of minibatch `mb` with every row run beside its mirror (`algo.symmetry`):
        PPO's terms over the rows and, with augmentation, over their mirrors too (each of the
        pair weighted half the row's weight: the minibatch extended by its mirror), plus the
        mirror loss; the mirror loss is measured (logged) in either mode. A feed-forward policy
        without augmentation runs only its actor on the mirrors (`_mirror_loss_alone`)."""
        m = self.mirror
        assert m is not None
        obs, actions, old_logprobs, old_values, advantages, returns = mb[:6]
        extra = mb[8:] if self.seq_len else mb[6:]
        mirrored = m.obs(obs)
        s = self.algo.symmetry
        if not s.augment:
            return self._mirror_loss_alone(params, buffers, mb, weights, mirrored)
        fwd_obs: Tensor | dict[str, Tensor] | None = None
        pairing: Pairing
        if self.seq_len:
            pairing = chunk_pairing(weights.shape[0] // self.seq_len, self.seq_len)
            rows = self._sequences(obs, mb[6], mb[7])
            mirrors = self._sequences(mirrored, extra[1], mb[7])
            inputs = (
                join_obs(rows[0], mirrors[0], dim=1),
                torch.cat([rows[1], mirrors[1]]),
                torch.cat([rows[2], mirrors[2]], dim=1),
            )
            dist, value = functional_call(self.policy, (params, buffers), inputs)
        else:
            pairing = flat_pairing(weights.shape[0])
            fwd_obs = join_obs(obs, mirrored, dim=0)
            dist, value = functional_call(self.policy, (params, buffers), (fwd_obs,))
        if s.augment:
            ppo_weights = pairing.join(0.5 * weights, 0.5 * weights)
        else:
            ppo_weights = pairing.join(weights, torch.zeros_like(weights))
        # A mirrored sample was drawn by the mirrored behaviour policy: its old log-probability
        # is the row's own (module docstring of algo.symmetry); its old value is the behaviour
        # critic's at the mirrored observation.
        pairs = (
            (actions, m.actions(actions)),
            (old_logprobs, old_logprobs),
            (old_values, extra[0]),
            (advantages, advantages),
            (returns, returns),
        )
        fields = tuple(pairing.join(x, y) for x, y in pairs)
        # How far the policy moved from the behaviour policy (what the adaptive learning rate and
        # early_stop_kl read): on the collected rows alone. On a mirrored row the ratio also
        # holds the policy's asymmetry, which is not a step of the update.
        kl_weights = pairing.join(weights, torch.zeros_like(weights))
        loss, metrics = self._ppo(dist, value, fwd_obs, fields, ppo_weights, kl_weights)
        asymmetry = mirror_loss(dist, m, pairing, pairing.order(weights))
        return self._with_mirror_loss(loss, metrics, asymmetry)

    def _mirror_loss_alone(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        mb: tuple[Tensor, ...],
        weights: Tensor,
        mirrored: Tensor | dict[str, Tensor],
    ) -> tuple[Tensor, Tensor]:
        """The loss of a minibatch with the mirror loss and no augmentation: PPO's terms over
        the rows, plus the mirror loss, for which the actor alone runs on the mirrored
        observations (their values and log-probabilities weigh nothing here); a recurrent
        actor's mirrored chunks start from the states along the mirrored trajectories."""
        assert self.mirror is not None
        dist, value, fields, weights = self._forward(params, buffers, mb, weights)
        # A recurrent actor's mirrored chunks start from the mirrored trajectories' states (mb[9]).
        inputs = self._sequences(mirrored, mb[9], mb[7]) if self.seq_len else (mirrored,)
        mirrored_dist, _ = functional_call(
            self.policy, (params, buffers), inputs, {"critic": False}
        )
        loss, metrics = self._ppo(dist, value, mb[0], fields[:5], weights)
        loss = self._with_distill(loss, metrics, dist, fields[5:], weights)
        asymmetry = mirror_loss_of(
            action_means(dist), action_means(mirrored_dist), self.mirror, weights
        )
        return self._with_mirror_loss(loss, metrics, asymmetry)

    def _with_distill(
        self,
        loss: Tensor,
        metrics: dict[str, Tensor],
        dist: Distribution,
        fields: tuple[Tensor, ...],
        weights: Tensor,
    ) -> Tensor:
        """The `loss` plus each row's distillation error weighted by its coefficient
        (`fields`: the teachers' actions and the coefficients, in the forward's row order);
        the unweighted error is logged as distill_loss. Without a distillation: `loss`."""
        if self.distill is None:
            return loss
        assert isinstance(dist, DiagGaussian)
        targets, coef = fields
        error = self.distill.error(dist, targets) * weights
        metrics["distill_loss"] = error.detach().sum()
        return loss + (error * coef).sum()

    def _with_mirror_loss(
        self, loss: Tensor, metrics: dict[str, Tensor], asymmetry: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The PPO `loss` plus the weighted mirror loss (`asymmetry`), and the metrics vector
        with both (the mirror loss logged whatever its coefficient)."""
        coef = self.algo.symmetry.mirror_loss_coef
        if coef > 0:
            loss = loss + coef * asymmetry
        metrics["mirror_loss"] = asymmetry.detach()
        metrics["loss"] = loss.detach()
        return loss, torch.stack([metrics[n] for n in self.names])

    def _ppo(
        self,
        dist: Distribution,
        value: Tensor,
        obs: Tensor | dict[str, Tensor] | None,
        fields: tuple[Tensor, ...],
        weights: Tensor,
        kl_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The PPO loss and its metrics of a forward pass (`dist`, `value`) over `obs`, with
        the rows' actions, old log-probs, old values, advantages and returns (`fields`, in the
        forward's row order), aggregation `weights` and approx_kl's (`kl_weights`, default
        `weights`)."""
        actions, old_logprobs, old_values, advantages, returns = fields
        logprob = dist.log_prob(actions)  # (B,)
        a = self.algo
        kl = None
        if self.reference is not None:
            assert obs is not None
            with torch.no_grad():
                ref_dist, _ = self.reference(obs)
            kl = kl_estimate(a.kl_loss_type, logprob, ref_dist.log_prob(actions), dist, ref_dist)
        critic = a.loss_type == "actor_critic"
        loss, metrics = ppo_loss(
            logprob,
            old_logprobs,
            advantages,
            dist.entropy(),
            weights,
            clip_ratio_low=a.clip_ratio_low,
            clip_ratio_high=a.clip_ratio_high,
            clip_ratio_c=a.clip_ratio_c,
            entropy_bonus=a.entropy_bonus,
            values=value if critic else None,
            old_values=old_values if critic else None,
            returns=returns if critic else None,
            value_clip=a.value_clip,
            huber_delta=a.huber_delta,
            value_loss_coef=a.value_loss_coef,
            kl=kl,
            kl_loss_coef=a.kl_loss_coef,
            kl_weights=kl_weights,
        )
        if isinstance(dist, DiagGaussian):
            metrics["std"] = (dist.std.detach().mean(dim=-1) * weights).sum()
        return loss, metrics
