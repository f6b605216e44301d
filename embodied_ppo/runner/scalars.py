"""The scalars one training iteration logs, under their TensorBoard tags."""

from __future__ import annotations

import numpy as np

from embodied_ppo.algo.losses import explained_variance
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.runner.buffer import RolloutBuffer


def iteration_scalars(
    episode_returns: list[float],
    episode_lengths: list[int],
    episode_successes: list[float],
    metrics: dict[str, float],
    buffer: RolloutBuffer,
    lr: float,
    sps: float,
    t_collect: float,
    t_update: float,
    reward_scaler: RewardScaler | None,
    episode_logs: list[dict[str, float]] | None = None,
) -> dict[str, float]:
    """Every scalar one iteration logs, under its TensorBoard tag."""
    out: dict[str, float] = {}
    out.update(episode_log_means(episode_logs or []))
    if episode_returns:
        out["charts/episodic_return"] = float(np.mean(episode_returns))
        out["charts/episodic_length"] = float(np.mean(episode_lengths))
    if episode_successes:  # the episodes whose env reported info["is_success"] at their end
        out["charts/success_rate"] = float(np.mean(episode_successes))
    out["charts/episodes"] = float(len(episode_returns))
    out["charts/SPS"] = sps
    out["charts/learning_rate"] = lr
    out["charts/collect_time"] = t_collect
    out["charts/update_time"] = t_update
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
