"""The policy, in torch only: actor-critic, encoders, recurrent cores, normalizers,
distributions, the inference network derived from the trained module, and the numpy snapshot
collection runs."""

from __future__ import annotations

from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import Categorical, DiagGaussian
from embodied_ppo.model.normalizer import ObsNormalizer, RunningMeanStd

__all__ = [
    "ActorCritic",
    "Categorical",
    "DiagGaussian",
    "ObsNormalizer",
    "RunningMeanStd",
]
