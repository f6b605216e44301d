"""Advantage estimators as pure tensor functions."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    ends: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over a (T, N) rollout.

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
    A_t     = delta_t + gamma * lambda * (1 - ends_t) * A_{t+1}

    Termination bootstraps with 0; a truncation bootstraps with next_values_t = V(final_obs); the
    trace is cut at every episode end. Returns (advantages, returns = advantages + values).
    """
    not_term = 1.0 - terminated
    carry = gamma * gae_lambda * (1.0 - ends)  # (T, N)
    deltas = rewards + gamma * not_term * next_values - values  # (T, N)
    adv = torch.zeros_like(values)
    last = torch.zeros_like(values[0])  # (N,)
    for t in range(values.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        adv[t] = last
    return adv, adv + values


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps) over every element (population std)."""
    return (x - x.mean()) / (x.std(correction=0) + eps)
