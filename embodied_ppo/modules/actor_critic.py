"""The actor-critic module: normalizer -> backbone(s) -> Gaussian or categorical head + value head.

Everything a deployed policy needs (normalizer statistics, action bounds, architecture) lives in
this module or in its `spec`, a plain dict that rebuilds it. Imports torch only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from embodied_ppo.modules.distributions import Categorical, DiagGaussian, Distribution
from embodied_ppo.modules.networks import init_linear, mlp
from embodied_ppo.modules.normalizer import ObsNormalizer

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class ActorCritic(nn.Module):
    """Shared-backbone (or separate) MLP actor-critic.

    Args:
        spec: plain dict with keys obs_dim, action_kind ("gaussian" | "categorical"), action_dim
            (dimensions, or number of actions), action_low / action_high (lists, Gaussian only),
            hidden_sizes, activation, share_backbone, log_std_init, state_dependent_std, init,
            normalize_obs, clip_obs.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.spec = dict(spec)
        obs_dim, act_dim = int(spec["obs_dim"]), int(spec["action_dim"])
        hidden, act = list(spec["hidden_sizes"]), spec["activation"]
        ortho = spec["init"] == "orthogonal"
        self.is_gaussian = spec["action_kind"] == "gaussian"
        self.state_dependent_std = bool(spec["state_dependent_std"]) and self.is_gaussian
        self.share_backbone = bool(spec["share_backbone"])

        self.obs_normalizer = ObsNormalizer(
            (obs_dim,), enabled=spec["normalize_obs"], clip=spec["clip_obs"]
        )
        self.actor_backbone = mlp(obs_dim, hidden, act, ortho)
        # With a shared backbone the critic reads the actor's features.
        self.critic_backbone = None if self.share_backbone else mlp(obs_dim, hidden, act, ortho)
        feat = hidden[-1]
        self.action_head = nn.Linear(feat, act_dim)
        self.value_head = nn.Linear(feat, 1)
        if ortho:
            init_linear(self.action_head, 0.01)
            init_linear(self.value_head, 1.0)
        if self.is_gaussian:
            if self.state_dependent_std:
                self.log_std_head = init_linear(
                    nn.Linear(feat, act_dim), 0.01, spec["log_std_init"]
                )
            else:
                self.log_std = nn.Parameter(torch.full((act_dim,), float(spec["log_std_init"])))
            low = torch.as_tensor(spec["action_low"], dtype=torch.float32)
            high = torch.as_tensor(spec["action_high"], dtype=torch.float32)
        else:
            low = high = torch.zeros(0)
        # Action bounds travel with the module (used by the deployed policy to clip).
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)

    def _features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.obs_normalizer(obs)
        actor = self.actor_backbone(x)
        critic = actor if self.critic_backbone is None else self.critic_backbone(x)
        return actor, critic

    def _dist(self, actor_feat: torch.Tensor) -> Distribution:
        out = self.action_head(actor_feat)
        if not self.is_gaussian:
            return Categorical(out)
        if self.state_dependent_std:
            log_std = self.log_std_head(actor_feat).clamp(LOG_STD_MIN, LOG_STD_MAX)
        else:
            log_std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return DiagGaussian(out, log_std)

    def forward(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """Action distribution and value (B,) for a batch of raw observations (B, obs_dim)."""
        actor, critic = self._features(obs)
        return self._dist(actor), self.value_head(critic).squeeze(-1)

    def sample_noise(
        self, batch: int, device: torch.device, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Noise for `act`, drawn for a whole batch at once so chunking never changes samples."""
        dist_cls = DiagGaussian if self.is_gaussian else Categorical
        return dist_cls.noise(batch, int(self.spec["action_dim"]), device, generator)

    def act(
        self, obs: torch.Tensor, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (from `noise`, see `sample_noise`) or take the mode; returns (action, log_prob, value)."""
        dist, value = self(obs)
        action = dist.mode() if deterministic else dist.sample(noise)
        return action, dist.log_prob(action), value

    def evaluate(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Distribution]:
        """Log-prob and entropy of `action`, value, and the distribution, for the update."""
        dist, value = self(obs)
        return dist.log_prob(action), dist.entropy(), value, dist

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State value (B,) only."""
        _, critic = self._features(obs)
        return self.value_head(critic).squeeze(-1)
