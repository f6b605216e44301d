"""The environment layer: vector envs behind one protocol (Gymnasium's sync and async envs, env
worker processes, envpool; mjlab's batched envs on the device behind its tensor twin), their seeds and mid-episode state, and the checks that build an env.

This is the only package that steps environments. (The project's own tasks are a separate
package, `embodied_ppo_envs`: they are environments, this is how environments are stepped.)
"""

from __future__ import annotations

import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.vecenv.device_protocol import DeviceStep, DeviceVecEnv
from embodied_ppo.vecenv.envpool_backend import EnvPoolVecEnv
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv
from embodied_ppo.vecenv.mjlab_backend import MjlabVecEnv
from embodied_ppo.vecenv.protocol import StepResult, VecEnv
from embodied_ppo.vecenv.seeding import env_seeds, group_seeds, noise_seed
from embodied_ppo.vecenv.spaces import SpaceInfo, describe_spaces

__all__ = [
    "DeviceStep",
    "DeviceVecEnv",
    "SpaceInfo",
    "StepResult",
    "VecEnv",
    "describe_spaces",
    "env_seeds",
    "group_seeds",
    "make_env",
    "noise_seed",
]


def make_env(
    cfg: EnvConfig, seed: int, env_offset: int = 0, device: torch.device | None = None
) -> VecEnv | DeviceVecEnv:
    """The training vector env of `cfg.backend` (`cfg` already validated).

    `env_offset` is the global index of this process's first env (distributed runs); `device`
    the training device, where a device env (backend mjlab) lives.
    """
    if cfg.backend == "mjlab":
        return MjlabVecEnv(cfg, seed, env_offset, device)
    if cfg.backend == "envpool":
        return EnvPoolVecEnv(cfg, seed, env_offset)
    return GymnasiumVecEnv(cfg, seed, env_offset)
