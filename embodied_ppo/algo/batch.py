"""The update's batch of a collected rollout: advantages and returns, the in-reward KL
penalty, recomputed log-probs, and advantages refreshed between epochs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from embodied_ppo.algo.advantages import Estimator, Trajectories, compute_advantages
from embodied_ppo.algo.kl import InRewardKL
from embodied_ppo.config.schema import AlgorithmConfig
from embodied_ppo.core.obs import map_obs, obs_rows
from embodied_ppo.core.types import Reduce
from embodied_ppo.model.actor_critic import ActorCritic

# The flattened rollout fields the update reads (buffer.flat(*BATCH_FIELDS)).
BATCH_FIELDS = (
    "obs", "actions", "logprobs", "values", "advantages", "returns", "mask", "states", "starts"
)  # fmt: skip


VALUE_ROWS = 8192  # rows per critic forward pass when advantages are recomputed

ObsTensor = Tensor | dict[str, Tensor]


class Rollout(Protocol):
    """What batch preparation reads and writes of a collected rollout (the runner's
    Rollout): (T, N) tensors, and the bootstrap observations where they were kept."""

    num_steps: int
    num_envs: int
    rewards: Tensor
    values: Tensor
    next_values: Tensor
    final_values: Tensor
    terminated: Tensor
    ends: Tensor
    mask: Tensor
    advantages: Tensor
    returns: Tensor
    last_obs: ObsTensor | None
    final_obs: list[tuple[int, Tensor, ObsTensor]]

    def flat(self, *names: str) -> dict[str, ObsTensor]:
        """Views of the named fields with (T, N) flattened to (T*N,)."""
        ...

    def finalize_next_values(self, last_values: Tensor) -> None:
        """Fill next_values from the values, V(s_T) = `last_values` and the truncations."""
        ...


def recompute_logprobs(
    policy: ActorCritic, obs: Tensor, actions: Tensor, chunk: int | None
) -> Tensor:
    """Log-probs of `actions` under `policy` now, `chunk` transitions per forward pass."""
    rows = obs_rows(obs)
    chunk = chunk or rows
    with torch.no_grad():
        return torch.cat(
            [
                policy.evaluate(
                    map_obs(lambda x, i=i: x[i : i + chunk], obs), actions[i : i + chunk]
                )[0]
                for i in range(0, rows, chunk)
            ]
        )


def advantages_into(buf: Rollout, algo: AlgorithmConfig, reduce: Reduce | None) -> None:
    """Advantages and returns of the buffer's rewards and values (`algo.adv_type`), written
    into the buffer."""
    a = algo
    rollout = Trajectories(
        buf.rewards, buf.values, buf.next_values, buf.terminated, buf.ends, buf.mask
    )
    estimator = Estimator(
        a.adv_type, a.gamma, a.gae_lambda, group_size=a.group_size, normalize=a.normalize_advantages
    )
    adv, ret = compute_advantages(rollout, estimator, reduce)
    buf.advantages.copy_(adv)
    buf.returns.copy_(ret)


def prepare_batch(
    buf: Rollout,
    policy: ActorCritic,
    algo: AlgorithmConfig,
    in_reward_kl: InRewardKL | None,
    reduce: Reduce | None,
) -> tuple[dict, dict[str, float]]:
    """The update's batch of a collected rollout, and the in-reward KL's scalars.

    Applies the in-reward KL penalty to the rewards, computes advantages and returns (into the
    buffer) with `algo.adv_type`, and recomputes the old log-probs where asked.
    """
    a = algo
    batch = buf.flat(*BATCH_FIELDS)
    extra: dict[str, float] = {}
    if in_reward_kl is not None:
        extra = in_reward_kl.penalize(buf.rewards, buf.mask, batch)
    advantages_into(buf, a, reduce)
    if a.recompute_old_logprobs:
        chunk = a.logprob_forward_micro_batch_size
        batch["logprobs"] = recompute_logprobs(policy, batch["obs"], batch["actions"], chunk)
    return batch, extra


def refresh_advantages(
    buf: Rollout,
    policy: ActorCritic,
    algo: AlgorithmConfig,
    reduce: Reduce | None,
    scale: Callable[[Tensor], Tensor] | None = None,
) -> None:
    """`algorithm.recompute_advantages`: the rollout's values under the critic as it is now,
    and GAE advantages and returns from them, written into the buffer (and so into the update's
    batch, whose fields are views of it).

    Every bootstrap is valued again too: V(s_T) from the observation after the last step and
    V(final_obs) of each truncation, both kept by the collector. The rewards are the rollout's
    own (scaled, and KL-penalized where that applies). The stored values change with them, so
    value clipping is measured from the values the epoch starts with. `scale` turns the
    critic's outputs into values where they are not (`algorithm.normalize_value`).
    """
    assert buf.last_obs is not None, "the collector did not keep the bootstrap observations"
    T, N = buf.num_steps, buf.num_envs
    obs = buf.flat("obs")["obs"]

    def value(o: ObsTensor) -> Tensor:
        """V(o), in the reward's units."""
        v = policy.value(o)
        return v if scale is None else scale(v)

    with torch.no_grad():
        values = [
            value(map_obs(lambda x, i=i: x[i : i + VALUE_ROWS], obs))
            for i in range(0, T * N, VALUE_ROWS)
        ]
        buf.values.copy_(torch.cat(values).reshape(T, N))
        for t, rows, final in buf.final_obs:
            buf.final_values[t, rows] = value(final)
        buf.finalize_next_values(value(buf.last_obs))
    advantages_into(buf, algo, reduce)
