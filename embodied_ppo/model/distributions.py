"""Action distributions with summed log-probs and entropies (no argument validation overhead)."""

from __future__ import annotations

import math

import torch

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class DiagGaussian:
    """Independent Gaussians per action dimension; log_prob and entropy sum over dimensions."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean  # (B, A)
        self.log_std = log_std.expand_as(mean)  # (B, A)

    @property
    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    @staticmethod
    def noise(
        batch: int, dim: int, device: torch.device, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Standard normal noise (B, A) for `sample`."""
        return torch.randn(batch, dim, device=device, generator=generator)

    def sample(self, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Reparameterized sample mean + std * noise; noise drawn here when not given."""
        if noise is None:
            noise = torch.randn_like(self.mean)
        return self.mean + self.std * noise

    def mode(self) -> torch.Tensor:
        """The most likely action: the mean (B, A)."""
        return self.mean

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-density of `action` (B, A), summed over the action dimensions: (B,)."""
        z = (action - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - _LOG_SQRT_2PI).sum(dim=-1)  # (B,)

    def entropy(self) -> torch.Tensor:
        """Entropy summed over the action dimensions: (B,)."""
        return (0.5 + _LOG_SQRT_2PI + self.log_std).sum(dim=-1)  # (B,)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        """Exact KL(self || other), summed over dimensions."""
        var_ratio = torch.exp(2.0 * (self.log_std - other.log_std))
        mean_term = ((self.mean - other.mean) * torch.exp(-other.log_std)).square()
        return 0.5 * (var_ratio + mean_term - 1.0 - torch.log(var_ratio)).sum(dim=-1)


class Categorical:
    """Categorical distribution over the last dimension of `logits`."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # normalized log-probs (B, K)

    @property
    def probs(self) -> torch.Tensor:
        return self.logits.exp()

    @staticmethod
    def noise(
        batch: int, dim: int, device: torch.device, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Uniform noise (B,) for `sample`."""
        return torch.rand(batch, device=device, generator=generator)

    def sample(self, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Inverse-CDF sample from uniform `noise` (B,); noise drawn here when not given."""
        if noise is None:
            noise = torch.rand(self.logits.shape[:-1], device=self.logits.device)
        cdf = self.probs.cumsum(dim=-1)  # (B, K)
        index = (cdf < noise.unsqueeze(-1)).sum(dim=-1)
        return index.clamp(max=self.logits.shape[-1] - 1)

    def mode(self) -> torch.Tensor:
        """The most likely category (B,)."""
        return self.logits.argmax(dim=-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-probability of the categories `action` (B,) (any dtype, read as indices)."""
        return self.logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy (B,); categories of probability 0 contribute 0, not NaN."""
        p_logp = self.probs * self.logits
        return -torch.where(self.probs > 0, p_logp, torch.zeros_like(p_logp)).sum(dim=-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        """Exact KL(self || other)."""
        diff = self.probs * (self.logits - other.logits)
        return torch.where(self.probs > 0, diff, torch.zeros_like(diff)).sum(dim=-1)


Distribution = DiagGaussian | Categorical
