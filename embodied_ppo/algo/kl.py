"""KL to a frozen reference policy: the per-token estimators, the in-reward penalty and its coefficient controller."""

from __future__ import annotations

import torch
from torch import Tensor

from embodied_ppo.config.schema import AlgorithmConfig
from embodied_ppo.core.obs import map_obs, obs_rows
from embodied_ppo.core.types import Reduce
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import Distribution

KL_ALIASES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


# The most one token's k3 (`low_var_kl`) estimate counts (verl's cap).
K3_CAP = 10.0


def kl_estimate(
    kind: str,
    logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    dist: Distribution | None = None,
    ref_dist: Distribution | None = None,
) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) for actions sampled from pi.

    With log r = logprob - ref_logprob: k1 `kl` = log r (unbiased); `abs` = |log r|;
    k2 `mse` = 0.5 (log r)^2; k3 `low_var_kl` = exp(-log r) - 1 + log r (unbiased, >= 0),
    capped at K3_CAP = 10;
    `full` = the exact KL between the two action distributions (closed form).
    """
    kind = KL_ALIASES.get(kind, kind)
    if kind == "full":
        if dist is None or ref_dist is None:
            raise ValueError("kl type 'full' needs both distributions")
        return dist.kl(ref_dist)
    log_r = (logprob - ref_logprob).clamp(-20.0, 20.0)
    if kind == "kl":
        return log_r
    if kind == "abs":
        return log_r.abs()
    if kind == "mse":
        return 0.5 * log_r.square()
    if kind == "low_var_kl":
        # Capped at K3_CAP as verl's `low_var_kl` is: exp(-log r) grows without bound where the
        # policy gives an action far less probability than the reference (log r = -19.9: 4e8,
        # with a gradient as large), and one such token would dominate a whole batch.
        return (torch.expm1(-log_r) + log_r).clamp(max=K3_CAP)
    raise ValueError(f"unknown kl type {kind!r}")


def adaptive_kl_coef(coef: float, kl: float, target_kl: float, n_steps: int, horizon: int) -> float:
    """InstructGPT's proportional controller for the in-reward KL coefficient.

    error = clip(kl / target - 1, -0.2, 0.2); coef *= 1 + error * n_steps / horizon.
    """
    error = min(max(kl / target_kl - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)


class InRewardKL:
    """The in-reward KL penalty: r_t -= coef * KL_t(behaviour || reference), with the fixed or
    adaptive (InstructGPT) coefficient controller of `algorithm.kl_ctrl`.

    Args:
        coef: the current coefficient (the configured kl_coef, or a resumed run's).
        reduce: sums over processes, so the controller sees the mean KL of all of them.
    """

    def __init__(
        self,
        algo: AlgorithmConfig,
        policy: ActorCritic,
        reference: ActorCritic,
        coef: float,
        reduce: Reduce | None = None,
    ) -> None:
        self.algo, self.policy, self.reference = algo, policy, reference
        self.coef, self.reduce = coef, reduce

    @torch.no_grad()
    def penalize(self, rewards: Tensor, mask: Tensor, batch: dict[str, Tensor]) -> dict[str, float]:
        """Subtract the penalty from `rewards` (T, N) in place; returns the scalars to log."""
        a = self.algo
        obs, actions = batch["obs"], batch["actions"]
        rows = obs_rows(obs)
        chunk = a.logprob_forward_micro_batch_size or rows
        parts = []
        for i in range(0, rows, chunk):
            sl = slice(i, i + chunk)
            part = map_obs(lambda x, sl=sl: x[sl], obs)
            ref_dist, _ = self.reference(part)
            dist = self.policy(part)[0] if a.kl_penalty == "full" else None
            lp_ref = ref_dist.log_prob(actions[sl])
            parts.append(kl_estimate(a.kl_penalty, batch["logprobs"][sl], lp_ref, dist, ref_dist))
        kl = torch.cat(parts).reshape(rewards.shape)  # (T, N)
        coef = self.coef
        rewards.sub_(coef * kl)
        n, kl_sum = mask.sum(), (kl * mask).sum()
        if self.reduce is not None:  # the mean over every process's transitions
            packed = self.reduce(torch.stack([n, kl_sum]).to(torch.float64))
            n, kl_sum = packed[0], packed[1]
        mean_kl = float(kl_sum / n)
        if a.kl_ctrl.type == "adaptive":
            self.coef = adaptive_kl_coef(
                coef, mean_kl, a.kl_ctrl.target_kl, int(n), a.kl_ctrl.horizon
            )
        return {"charts/kl_in_reward": mean_kl, "charts/kl_coef": coef}
