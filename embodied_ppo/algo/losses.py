"""The PPO loss as a pure function returning (loss, metrics), and the KL estimators.

Aggregation is expressed by per-token `weights` (B,): every term is `sum(weights * x)`. The
caller derives the weights from `loss_agg_func` over the whole minibatch (token-mean: mask / number
of valid tokens; seq-mean-token-sum: mask / number of sequences; seq-mean-token-mean:
mask / (tokens of the sequence x number of sequences)), so splitting a minibatch into
micro-batches and summing their losses gives the minibatch loss exactly (docs/design.md, rule 3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def value_error(err: torch.Tensor, huber_delta: float | None) -> torch.Tensor:
    """huber(err, delta), or 0.5 * err^2 when `huber_delta` is None."""
    if huber_delta is None:
        return 0.5 * err.square()
    return F.huber_loss(err, torch.zeros_like(err), reduction="none", delta=huber_delta)


def ppo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    weights: torch.Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None,
    entropy_bonus: float,
    values: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
    value_clip: float | None = None,
    huber_delta: float | None = None,
    value_loss_coef: float = 0.0,
    kl: torch.Tensor | None = None,
    kl_loss_coef: float = 0.0,
    kl_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (+ clipped value loss when `values` is given) - entropy (+ KL).

    `loss_type: actor_critic` passes values/old_values/returns; `loss_type: actor` leaves them None.
    Returns the scalar loss and detached metrics, each aggregated with `weights` like the loss,
    but approx_kl, aggregated with `kl_weights` where given (the rows whose step it measures).
    """

    def agg(x: torch.Tensor) -> torch.Tensor:
        """A per-token term aggregated like the loss: sum(weights * x)."""
        return (x * weights).sum()

    log_ratio = (logprob - old_logprob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    surr = -advantages * ratio
    surr_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    pg = torch.maximum(surr, surr_clipped)  # (B,)
    if clip_ratio_c is not None:
        # Dual clip: for A < 0 the loss is bounded by -A * c however large the ratio grows.
        bound = -advantages * clip_ratio_c
        dual_active = (advantages < 0) & (pg > bound)
        pg = torch.where(advantages < 0, torch.minimum(pg, bound), pg)
    else:
        dual_active = torch.zeros_like(advantages, dtype=torch.bool)

    policy_loss, ent = agg(pg), agg(entropy)
    loss = policy_loss - entropy_bonus * ent
    metrics: dict[str, torch.Tensor] = {}
    if values is not None:
        assert old_values is not None and returns is not None
        v_loss = value_error(returns - values, huber_delta)
        delta_v = values - old_values
        if value_clip is not None:
            v_clipped = old_values + delta_v.clamp(-value_clip, value_clip)
            v_loss = torch.maximum(v_loss, value_error(returns - v_clipped, huber_delta))
            metrics["value_clipfrac"] = agg((delta_v.detach().abs() > value_clip).float())
        else:
            metrics["value_clipfrac"] = torch.zeros((), device=weights.device)
        value_loss = agg(v_loss)
        loss = loss + value_loss_coef * value_loss
        metrics["value_loss"] = value_loss.detach()
    if kl is not None:
        kl_loss = agg(kl)
        loss = loss + kl_loss_coef * kl_loss
        metrics["kl_loss"] = kl_loss.detach()

    with torch.no_grad():
        clipped = ((ratio < 1.0 - clip_ratio_low) | (ratio > 1.0 + clip_ratio_high)).float()
        metrics.update(
            policy_loss=policy_loss.detach(),
            entropy=ent.detach(),
            approx_kl=(
                approx_kl_terms(log_ratio) * (weights if kl_weights is None else kl_weights)
            ).sum(),
            clipfrac=agg(clipped),
            dual_clipfrac=agg(dual_active.float()),
        )
    return loss, metrics


def approx_kl_terms(log_ratio: torch.Tensor) -> torch.Tensor:
    """(r - 1) - log r per token, exact near r = 1.

    In float32 the plain difference cancels to rounding noise of +-6e-8 a token there (below
    zero, too), which a small early_stop_kl or desired_kl would read as the policy moving.
    expm1 alone is not enough: Inductor's vectorized CPU kernels compute it as exp(x) - 1. In
    float64 either way leaves ~1e-16."""
    x = log_ratio.double()
    return (torch.expm1(x) - x).to(log_ratio.dtype)


def explained_variance(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """1 - Var[target - pred] / Var[target] over the valid entries; NaN when the target is constant."""
    if mask is not None:
        keep = mask.bool()
        pred, target = pred[keep], target[keep]
    var_t = target.var(correction=0)
    return 1.0 - (target - pred).var(correction=0) / var_t
