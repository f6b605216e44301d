"""The `actor_critic` loss as a pure function returning (loss, metrics).

Aggregation is token-mean (one token = one environment step): every term is summed over the
tokens given and divided by `denom`. Passing the minibatch size as `denom` for each micro-batch
makes the sum of micro-batch losses equal the minibatch loss exactly (DESIGN Rule 3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def value_error(err: torch.Tensor, huber_delta: float | None) -> torch.Tensor:
    """huber(err, delta), or 0.5 * err^2 when `huber_delta` is None."""
    if huber_delta is None:
        return 0.5 * err.square()
    return F.huber_loss(err, torch.zeros_like(err), reduction="none", delta=huber_delta)


def actor_critic_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None,
    value_clip: float | None,
    huber_delta: float | None,
    entropy_bonus: float,
    value_loss_coef: float,
    denom: float | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate + clipped value loss - entropy bonus over a batch of tokens (B,).

    Returns the scalar loss and detached metrics, each aggregated like the loss (sum / denom).
    """
    if mask is None:
        mask = torch.ones_like(advantages)
    if denom is None:
        denom = float(mask.shape[0])

    def agg(x: torch.Tensor) -> torch.Tensor:
        return (x * mask).sum() / denom

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

    v_loss = value_error(returns - values, huber_delta)
    delta_v = values - old_values
    if value_clip is not None:
        v_clipped = old_values + delta_v.clamp(-value_clip, value_clip)
        v_loss = torch.maximum(v_loss, value_error(returns - v_clipped, huber_delta))
        value_clipped = (delta_v.abs() > value_clip).float()
    else:
        value_clipped = torch.zeros_like(values)

    policy_loss, value_loss, ent = agg(pg), agg(v_loss), agg(entropy)
    loss = policy_loss + value_loss_coef * value_loss - entropy_bonus * ent

    with torch.no_grad():
        clipped = ((ratio < 1.0 - clip_ratio_low) | (ratio > 1.0 + clip_ratio_high)).float()
        metrics = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": ent.detach(),
            "approx_kl": agg((ratio - 1.0) - log_ratio),
            "clipfrac": agg(clipped),
            "dual_clipfrac": agg(dual_active.float()),
            "value_clipfrac": agg(value_clipped),
        }
    return loss, metrics


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Var[target - pred] / Var[target]; NaN when the target is constant."""
    var_t = target.var(correction=0)
    return 1.0 - (target - pred).var(correction=0) / var_t
