"""Seeds of environments and sampling noise, derived from the run seed (numpy SeedSequence).

Every seed is a pure function of the run seed and a global index, so env k is the same env
whatever the number of envs per process or of processes.
"""

from __future__ import annotations

import numpy as np


def _derive(seed: int, *key: int) -> int:
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1, np.uint32)[0])


def env_seeds(seed: int, num_envs: int, offset: int = 0, generation: int = 0) -> list[int]:
    """Independent per-env seeds from the run seed and the global env index `offset + k`.

    `generation` gives a fresh, still deterministic, set of seeds (used when a run resumes).
    """
    return [_derive(seed, offset + k, generation) for k in range(num_envs)]


def group_seeds(
    seed: int, num_envs: int, group_size: int, rollout: int, offset: int = 0
) -> list[int]:
    """Reset seeds for episodic collection: the `group_size` envs of a group share one seed.

    Every rollout gets fresh seeds, so groups start from new (but within a group, identical)
    states. Envs are numbered globally from `offset` (distributed runs).
    """
    return [_derive(seed, k // group_size, rollout, 1) for k in range(offset, offset + num_envs)]


def noise_seed(seed: int, rollout: int) -> int:
    """Seed of the sampling noise of one rollout (shared by every process of a run)."""
    return _derive(seed, rollout, 2)


def warm_up_seed(rollout_noise_seed: int) -> int:
    """Seed of the sampling noise of the warm-up before a run's first rollout, from that
    rollout's noise seed."""
    return _derive(rollout_noise_seed, 3)


def episode_start_seed(reset_seed: int) -> int:
    """Seed of the random first-episode steps (env.random_episode_start) of a reset with
    `reset_seed`: a stream of its own, not the one the simulator seeds with the same integer."""
    return _derive(reset_seed, 4)
