"""PPO written out once more, by hand, as the tests' reference.

Nothing here calls `embodied_ppo.algo`: the advantages are textbook loops, the log-probabilities
and entropies come from `torch.distributions`, the loss is the clipped surrogate in its textbook
`min` form, the gradient is autograd's, and the steps are `torch.optim.Adam` after
`torch.nn.utils.clip_grad_norm_`. Only the policy's forward pass (the model under training) is
the package's. The tests compare the package's update with this one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor

from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN
from embodied_ppo.model.actor_critic import ActorCritic

# ------------------------------------------------------------------------------ advantages


def gae(rewards, values, next_values, terminated, ends, gamma, lam):
    """(advantages, returns) of a (T, N) rollout: the backward recursion, one step at a time.

    delta_t = r_t + gamma (1 - terminated_t) V'_t - V_t;  A_t = delta_t + gamma lam (1 - end_t) A_t+1
    """
    T = rewards.shape[0]
    r, v, nv = rewards.double(), values.double(), next_values.double()
    adv = torch.zeros_like(r)
    running = torch.zeros_like(r[0])
    for t in reversed(range(T)):
        delta = r[t] + gamma * (1.0 - terminated[t].double()) * nv[t] - v[t]
        running = delta + gamma * lam * (1.0 - ends[t].double()) * running
        adv[t] = running
    return adv.float(), (adv + v).float()


def returns_to_go(rewards, mask, gamma):
    """sum_k gamma^k r_t+k over each column's valid steps (T, N), 0 on the masked steps."""
    out = torch.zeros_like(rewards, dtype=torch.float64)
    for n in range(rewards.shape[1]):
        steps = mask[:, n].nonzero().flatten().tolist()
        for t in steps:
            out[t, n] = sum(gamma ** (k - t) * float(rewards[k, n]) for k in steps if k >= t)
    return out.float()


def grpo(rewards, mask, group_size):
    """Each episode's (column's) return against its group's: (score - mean) / (sample std + 1e-6),
    on every valid step of the episode."""
    scores = (rewards.double() * mask).sum(dim=0)  # (N,)
    adv = torch.zeros(rewards.shape[1], dtype=torch.float64)
    for g in range(0, len(scores), group_size):
        group = scores[g : g + group_size]
        mean = group.sum() / group_size
        std = (((group - mean) ** 2).sum() / (group_size - 1)).sqrt()
        adv[g : g + group_size] = (group - mean) / (std + 1e-6)
    return (adv.unsqueeze(0) * mask).float()


def standardize(x, mask):
    """(x - mean) / (population std + 1e-8) over the valid entries; 0 elsewhere."""
    valid = x[mask > 0].double()
    mean = valid.mean()
    std = ((valid - mean) ** 2).mean().sqrt()
    return ((x.double() - mean) / (std + 1e-8) * mask).float()


# ------------------------------------------------------------------------------ the loss


@dataclass(frozen=True)
class Terms:
    """The loss's keys, with the schema's defaults."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    entropy_bonus: float = 0.0
    value_clip: float | None = 0.2
    huber_delta: float | None = 10.0
    value_coef: float = 0.5
    critic: bool = True
    aggregation: str = "token-mean"


def distribution(
    policy: ActorCritic, obs, *recurrent
) -> tuple[torch.distributions.Distribution, Tensor]:
    """torch.distributions' action distribution (over whole actions) and the values of `obs`.

    The Gaussian's log-std is the parameter or the head's raw output itself, read before any
    clamp: the test keeps it inside [LOG_STD_MIN, LOG_STD_MAX], where a straight-through clamp
    is the identity in value and gradient."""
    raw: list[Tensor] = []
    hook = None
    if policy.is_gaussian and policy.state_dependent_std:
        hook = policy.log_std_head.register_forward_hook(lambda m, i, out: raw.append(out))
    try:
        dist, value = policy(obs, *recurrent)
    finally:
        if hook is not None:
            hook.remove()
    if not policy.is_gaussian:
        return torch.distributions.Categorical(logits=dist.logits), value
    log_std = raw[0] if raw else policy.log_std.expand_as(dist.mean)
    assert (log_std > LOG_STD_MIN).all() and (log_std < LOG_STD_MAX).all(), "outside the bounds"
    normal = torch.distributions.Normal(dist.mean, log_std.exp())
    return torch.distributions.Independent(normal, 1), value


def aggregate(x: Tensor, mask: Tensor, how: str) -> Tensor:
    """A (T, N) per-step term over the valid steps; column n is env n's sequence."""
    mask = mask.to(x.dtype)
    if how == "token-mean":
        return (x * mask).sum() / mask.sum()
    sums, lengths = (x * mask).sum(dim=0), mask.sum(dim=0)  # (N,)
    seqs = lengths > 0
    if how == "seq-mean-token-sum":
        return sums[seqs].mean()
    if how == "seq-mean-token-mean":
        return (sums[seqs] / lengths[seqs]).mean()
    raise ValueError(how)


def value_error(err: Tensor, delta: float | None) -> Tensor:
    """Huber's loss of the error (quadratic up to delta, linear past it), or half its square."""
    if delta is None:
        return 0.5 * err**2
    small = err.abs() <= delta
    return torch.where(small, 0.5 * err**2, delta * (err.abs() - 0.5 * delta))


def loss_terms(
    new_logprob, entropy, value, rollout: dict[str, Tensor], terms: Terms
) -> tuple[Tensor, dict[str, float]]:
    """The PPO loss of (T, N) per-step quantities, and its metrics."""
    adv, mask, how = rollout["advantages"], rollout["mask"], terms.aggregation
    ratio = torch.exp(new_logprob - rollout["logprobs"])
    lo, hi = 1.0 - terms.clip_low, 1.0 + terms.clip_high
    objective = torch.min(ratio * adv, ratio.clamp(lo, hi) * adv)  # the textbook form
    dual = torch.zeros_like(mask, dtype=torch.bool)
    if terms.dual_clip is not None:
        # For a negative advantage the objective is kept above c * A: max(min(...), c A).
        floor = terms.dual_clip * adv
        dual = (adv < 0) & (objective < floor)
        objective = torch.where(adv < 0, torch.max(objective, floor), objective)
    policy_loss = aggregate(-objective, mask, how)
    ent = aggregate(entropy, mask, how)
    loss = policy_loss - terms.entropy_bonus * ent
    log_r = (new_logprob - rollout["logprobs"]).detach().double()
    metrics = {
        "policy_loss": policy_loss.item(),
        "entropy": ent.item(),
        "clipfrac": aggregate(((ratio < lo) | (ratio > hi)).float(), mask, how).item(),
        "dual_clipfrac": aggregate(dual.float(), mask, how).item(),
        "approx_kl": aggregate(torch.expm1(log_r) - log_r, mask.double(), how).item(),
    }
    if terms.critic:
        old, ret = rollout["values"], rollout["returns"]
        err = value_error(ret - value, terms.huber_delta)
        moved = value - old
        if terms.value_clip is not None:
            clipped = old + moved.clamp(-terms.value_clip, terms.value_clip)
            err = torch.max(err, value_error(ret - clipped, terms.huber_delta))
            outside = (moved.detach().abs() > terms.value_clip).float()
            metrics["value_clipfrac"] = aggregate(outside, mask, how).item()
        value_loss = aggregate(err, mask, how)
        loss = loss + terms.value_coef * value_loss
        metrics["value_loss"] = value_loss.item()
    return loss, metrics


def rollout_loss(
    policy: ActorCritic, rollout: dict[str, Tensor], terms: Terms
) -> tuple[Tensor, dict[str, float]]:
    """The loss of a (T, N) rollout (obs (T, N, ...), actions (T, N, ...)) under `policy`."""
    T, N = rollout["mask"].shape
    obs, actions = rollout["obs"], rollout["actions"]
    dist, value = distribution(policy, obs.reshape(T * N, *obs.shape[2:]))
    logprob = dist.log_prob(actions.reshape(T * N, *actions.shape[2:])).reshape(T, N)
    entropy = dist.entropy().reshape(T, N)
    return loss_terms(logprob, entropy, value.reshape(T, N), rollout, terms)


@dataclass(frozen=True)
class Steps:
    """The optimizer's settings of the reference steps (the schema's defaults)."""

    lr: float = 3e-4
    eps: float = 1e-5
    max_grad_norm: float | None = 0.5


class AdamReference:
    """A copy of a policy trained by plain autograd and torch.optim.Adam, one full-batch step at
    a time: the gradient clipped with torch.nn.utils.clip_grad_norm_, then Adam's step."""

    def __init__(self, policy: ActorCritic, opt: Steps) -> None:
        self.policy = copy.deepcopy(policy)
        for p in self.policy.parameters():
            p.data = p.data.clone()  # its own storage, whatever the original's was a view of
        self.opt = opt
        self.adam = torch.optim.Adam(self.policy.parameters(), lr=opt.lr, eps=opt.eps)

    def step(self, rollout: dict[str, Tensor], terms: Terms) -> dict[str, float]:
        """One step on the rollout's loss; its metrics (before the step)."""
        loss, metrics = rollout_loss(self.policy, rollout, terms)
        self.adam.zero_grad()
        loss.backward()
        if self.opt.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.opt.max_grad_norm)
        self.adam.step()
        return metrics

    def moments(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Adam's (exp_avg, exp_avg_sq) of each named parameter."""
        state = self.adam.state
        return {
            n: (state[p]["exp_avg"], state[p]["exp_avg_sq"])
            for n, p in self.policy.named_parameters()
        }


def adam_steps(
    policy: ActorCritic, rollout: dict[str, Tensor], terms: Terms, steps: int, opt: Steps
) -> tuple[ActorCritic, dict[str, float]]:
    """`steps` full-batch steps of `AdamReference` from `policy`; returns the trained copy and
    the metrics averaged over the steps."""
    ref = AdamReference(policy, opt)
    seen = [ref.step(rollout, terms) for _ in range(steps)]
    mean = {k: sum(m[k] for m in seen) / len(seen) for k in seen[0]}
    return ref.policy, mean


def max_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest difference between the two modules' parameters, name by name."""
    theirs = dict(b.named_parameters())
    return max((p - theirs[n]).abs().max().item() for n, p in a.named_parameters())


# ------------------------------------------------------------------------------ the package's side

ROLLOUT_FIELDS = (
    "obs", "actions", "logprobs", "values", "advantages", "returns", "mask", "rewards",
    "next_values", "terminated", "ends", "states", "starts",
)  # fmt: skip


@dataclass
class Captured:
    """What a trainer's update got and gave.

    Attributes:
        policy: a copy of the policy as the update found it.
        rollout: the buffer's (T, N) fields as the update found them (advantages and returns
            already computed; `logprobs` the old log-probs the update reads, `stored_logprobs`
            collection's).
        metrics: what the update returned.
        grads: the flat gradient (P,) of each of its steps, where recorded; in the order of the
            policy's named parameters.
    """

    policy: ActorCritic | None = None
    rollout: dict[str, Tensor] | None = None
    metrics: dict[str, float] | None = None
    grads: list[Tensor] | None = None


def capture(trainer, grads: bool = False) -> Captured:
    """Spy on `trainer`'s update (one-minibatch steps): what it gets, returns, and, with
    `grads`, the gradient of every step it takes (the step's own `grads` on the same minibatch,
    before the step)."""
    seen = Captured(grads=[] if grads else None)
    updater = trainer.updater
    update, step = updater.update, updater.step.step

    def spy_update(batch, num_steps, refresh=None):
        seen.policy = copy.deepcopy(trainer.policy)
        for p in seen.policy.parameters():
            p.data = p.data.clone()
        buf = trainer.buffer
        seen.rollout = {name: getattr(buf, name).clone() for name in ROLLOUT_FIELDS}
        # The old log-probs the update reads: the stored ones, or those recomputed for it.
        seen.rollout["stored_logprobs"] = seen.rollout["logprobs"]
        seen.rollout["logprobs"] = batch["logprobs"].detach().clone().reshape(buf.logprobs.shape)
        seen.metrics = update(batch, num_steps, refresh)
        return seen.metrics

    def spy_step(mb, weights):
        seen.grads.append(updater.step.grads(mb, weights)[0].clone())
        return step(mb, weights)

    updater.update = spy_update
    if grads:
        updater.step.step = spy_step
    return seen


def flat_grad(policy: torch.nn.Module) -> Tensor:
    """The parameters' gradients as one vector, in the order of the named parameters."""
    return torch.cat([p.grad.reshape(-1) for _, p in policy.named_parameters()])


def gradient(policy: ActorCritic, rollout: dict[str, Tensor], terms: Terms) -> Tensor:
    """Autograd's gradient (P,) of the rollout's loss at `policy`'s parameters (a copy's)."""
    ref = copy.deepcopy(policy)
    for p in ref.parameters():
        p.data = p.data.clone()
    loss, _ = rollout_loss(ref, rollout, terms)
    loss.backward()
    return flat_grad(ref)
