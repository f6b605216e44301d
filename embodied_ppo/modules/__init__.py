"""Torch-only building blocks of the policy: normalizers, distributions, networks, actor-critic."""

from embodied_ppo.modules.actor_critic import ActorCritic
from embodied_ppo.modules.distributions import Categorical, DiagGaussian
from embodied_ppo.modules.normalizer import ObsNormalizer, RewardScaler, RunningMeanStd

__all__ = [
    "ActorCritic",
    "Categorical",
    "DiagGaussian",
    "ObsNormalizer",
    "RewardScaler",
    "RunningMeanStd",
]
