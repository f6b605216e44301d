"""Advantage estimators as pure tensor functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    ends: torch.Tensor,
    *,
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
    # A_t = delta_t + carry_t A_{t+1}: a linear recurrence backwards in time, solved as a scan
    # in float64 (log2(T) rounds of whole-array operations instead of T sequential steps).
    flip = (0,)
    adv = linear_scan(carry.flip(flip).double(), deltas.flip(flip).double()).flip(flip)
    adv = adv.to(values.dtype)
    return adv, adv + values


def linear_scan(
    coef: torch.Tensor, inputs: torch.Tensor, start: torch.Tensor | float = 0.0
) -> torch.Tensor:
    """x_t = coef_t * x_{t-1} + inputs_t along dim 0, with x_{-1} = `start`.

    A parallel prefix scan of the affine maps x -> coef_t x + inputs_t: after round k every
    entry holds the composition of the 2^k maps ending at it, so T steps take log2(T) rounds of
    whole-array operations, which beats a Python loop over T by orders of magnitude.
    """
    a = coef.clone()
    b = inputs.clone()
    b[0] = b[0] + a[0] * start
    a[0] = 0.0
    shift, T = 1, inputs.shape[0]
    while shift < T:
        # Compose each map with the one `shift` steps earlier (right-hand sides read old values).
        b[shift:] = b[shift:] + a[shift:] * b[:-shift]
        a[shift:] = a[shift:] * a[:-shift]
        shift *= 2
    return b


def masked_normalize(
    x: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-8,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Standardize the entries where `mask` is 1 (population std); masked entries become 0.

    `reduce` sums a tensor over the ranks of a distributed run: the statistics are then those of
    every rank's entries together.
    """
    if reduce is None:
        n = mask.sum().clamp(min=1.0)
        mean = (x * mask).sum() / n
        var = ((x - mean).square() * mask).sum() / n
    else:
        x64, m64 = x.to(torch.float64), mask.to(torch.float64)
        sums = reduce(torch.stack([m64.sum(), (x64 * m64).sum(), (x64.square() * m64).sum()]))
        n = sums[0].clamp(min=1.0)
        mean64 = sums[1] / n
        var = (sums[2] / n - mean64.square()).clamp(min=0.0).to(x.dtype)
        mean = mean64.to(x.dtype)
    return (x - mean) / (var.sqrt() + eps) * mask


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Return-to-go G_t = sum_k gamma^k r_{t+k} over each column's valid prefix (T, N).

    Episodic collection: column n holds one episode in its first valid steps (mask 1), the rest
    is masked out and contributes nothing.
    """
    out = torch.zeros_like(rewards)
    acc = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = (rewards[t] + gamma * acc) * mask[t]
        out[t] = acc
    return out


def episode_returns(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Undiscounted return of each column's episode (N,)."""
    return (rewards * mask).sum(dim=0)


def grpo(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """Group-relative advantages (N,): (score - group mean) / (group std + eps).

    Envs k*G .. k*G+G-1 form group k. The std is the sample std (correction 1).
    """
    g = scores.reshape(-1, group_size)
    adv = (g - g.mean(dim=1, keepdim=True)) / (g.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def rloo(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """Leave-one-out advantages (N,): score minus the mean score of the other group members."""
    g = scores.reshape(-1, group_size)
    baseline = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - baseline).reshape(-1)


def reinforce_plus_plus(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Discounted return-to-go per step, whitened over all valid steps of the batch (T, N)."""
    return masked_normalize(discounted_returns(rewards, mask, gamma), mask, reduce=reduce)


@dataclass(frozen=True)
class Trajectories:
    """The (T, N) tensors of a rollout that advantages are computed from.

    Attributes:
        next_values: the value of the state after each step (V(final_obs) on a truncation).
        terminated, ends: 1.0 where the episode terminated / ended (either way) at the step.
        mask: 1.0 on the steps that count (episodic rollouts: the steps of each env's episode).
    """

    rewards: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor
    terminated: torch.Tensor
    ends: torch.Tensor
    mask: torch.Tensor


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator and its constants (the algorithm block's keys of these names;
    `normalize` is `normalize_advantages`)."""

    adv_type: str
    gamma: float
    gae_lambda: float
    group_size: int = 1
    normalize: bool = True


def compute_advantages(
    rollout: Trajectories,
    estimator: Estimator,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) (T, N) of a rollout with the estimator `estimator.adv_type`.

    gae: returns = advantages + values. The critic-free estimators work on episodic rollouts
    (one episode per env, `mask` 1 on its steps) and return the returns-to-go as the value
    targets. With `normalize` the advantages are standardized over the valid transitions of
    the whole batch: every process's together when `reduce` sums over processes
    (docs/design.md, rule 7).
    """
    r, e = rollout, estimator
    mask, gamma = r.mask, e.gamma
    if e.adv_type == "gae":
        adv, ret = gae(
            r.rewards,
            r.values,
            r.next_values,
            r.terminated,
            r.ends,
            gamma=gamma,
            gae_lambda=e.gae_lambda,
        )
    else:
        ret = discounted_returns(r.rewards, mask, gamma)
        if e.adv_type == "reinforce_plus_plus":
            adv = reinforce_plus_plus(r.rewards, mask, gamma, reduce)
        elif e.adv_type in ("grpo", "rloo"):
            scores = episode_returns(r.rewards, mask)  # (N,)
            rule = grpo if e.adv_type == "grpo" else rloo
            adv = rule(scores, e.group_size).unsqueeze(0) * mask  # each episode's steps share it
        else:
            raise ValueError(f"unknown adv_type {e.adv_type!r}")
    if e.normalize:
        adv = masked_normalize(adv, mask, reduce=reduce)
    return adv, ret
