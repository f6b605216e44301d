"""The scalars one training iteration logs, under their TensorBoard tags."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embodied_ppo.algo.losses import explained_variance
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.runner.rollout import RolloutStats

# The mean return of the last 100 finished episodes, whichever iterations they ended in (the
# progress line's "return"): a measure of the policy that one lucky episode does not move.
RECENT_RETURN = "charts/episodic_return_100"


@dataclass(frozen=True)
class IterationTiming:
    """An iteration's learning rate and how long its parts took."""

    learning_rate: float
    sps: float  # environment steps per second since training (re)started
    collect_time: float  # seconds
    update_time: float


def iteration_scalars(
    stats: RolloutStats,
    metrics: dict[str, float],
    buffer: RolloutBuffer,
    timing: IterationTiming,
    reward_scaler: RewardScaler | None,
) -> dict[str, float]:
    """Every scalar one iteration logs, under its TensorBoard tag: the finished episodes'
    (`stats`), the update's `metrics`, the buffer's explained variance, the timing, and the
    reward scale (`reward_scaler`, where rewards are scaled)."""
    out: dict[str, float] = {}
    out.update(episode_log_means(stats.episode_logs))
    if stats.episode_returns:
        out["charts/episodic_return"] = float(np.mean(stats.episode_returns))
        out["charts/episodic_length"] = float(np.mean(stats.episode_lengths))
    if stats.episode_successes:  # the episodes whose env reported info["is_success"]
        out["charts/success_rate"] = float(np.mean(stats.episode_successes))
    out["charts/episodes"] = float(len(stats.episode_returns))
    out["charts/SPS"] = timing.sps
    out["charts/learning_rate"] = timing.learning_rate
    out["charts/collect_time"] = timing.collect_time
    out["charts/update_time"] = timing.update_time
    if reward_scaler is not None:
        out["charts/reward_scale_std"] = float(reward_scaler.stats.var.sqrt())
    for name, value in metrics.items():
        out[f"losses/{name}"] = value
    b = buffer
    out["losses/explained_variance"] = float(
        explained_variance(b.values.flatten(), b.returns.flatten(), b.mask.flatten())
    )
    return out


def episode_log_means(logs: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each key of the finished episodes' `info["log"]` dicts, over the episodes
    that reported it, under the key itself when it names its TensorBoard section
    (`rewards/tracking_lin_vel`), else under `episode/<key>`."""
    sums: dict[str, list[float]] = {}
    for log in logs:
        for key, value in log.items():
            sums.setdefault(key, []).append(value)
    return {
        (key if "/" in key else f"episode/{key}"): float(np.mean(values))
        for key, values in sums.items()
    }
