"""The environment layer: vector envs behind one protocol, and everything about their seeds and
mid-episode state.

    base                the VecEnv protocol, SpaceInfo and StepResult
    gymnasium_backend   the `sync` and `async` backends behind the VecEnv protocol
    serial              the serial vector env (optionally threaded) each process steps
    workers             the envs split over processes (`env.processes`), shared-memory batches
    envpool_backend     envpool's C++ thread pool with the same semantics
    state               capture / restore of envs mid-episode (exact resume)
    seeding             per-env, per-group and noise seeds from the run seed

This is the only package that touches Gymnasium's vector envs. (The project's own tasks are a
separate package: they are environments, this is how environments are stepped.)
"""

from __future__ import annotations

from embodied_ppo.config import EnvConfig
from embodied_ppo.vecenv.base import SpaceInfo, StepResult, VecEnv, describe_spaces
from embodied_ppo.vecenv.seeding import env_seeds, group_seeds, noise_seed

__all__ = [
    "SpaceInfo",
    "StepResult",
    "VecEnv",
    "describe_spaces",
    "env_seeds",
    "group_seeds",
    "make_env",
    "noise_seed",
]


def make_env(cfg: EnvConfig, seed: int, env_offset: int = 0) -> VecEnv:
    """The training vector env of `cfg.backend` (`cfg` already validated).

    `env_offset` is the global index of this process's first env (distributed runs).
    """
    if cfg.backend == "envpool":
        from embodied_ppo.vecenv.envpool_backend import EnvPoolVecEnv

        return EnvPoolVecEnv(cfg, seed, env_offset)
    from embodied_ppo.vecenv.gymnasium_backend import GymnasiumVecEnv

    return GymnasiumVecEnv(cfg, seed, env_offset)
