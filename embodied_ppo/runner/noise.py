"""A rollout's sampling noise, drawn all at once (docs/design.md, rule 3): standard normal for a
Gaussian head, uniform for a categorical one, (T, N, ...) for this process's N envs.

With a seed, the noise of global env k at step t is a pure function of (seed, t, k), whatever
the number of processes and however the forward passes are chunked. Host collection draws it
with numpy (`HostNoise`), device collection on the training device (`DeviceNoise`); both are a
`NoiseSource` over an `EnvSlice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from embodied_ppo.model.actor_critic import ActorCritic


@dataclass(frozen=True)
class EnvSlice:
    """This process's envs among the run's: global envs offset .. offset + count - 1 of
    `total` (all processes' envs together)."""

    offset: int
    count: int
    total: int


class NoiseSource(Protocol):
    """Draws a rollout's sampling noise."""

    def draw(self, steps: int, seed: int | None) -> np.ndarray | torch.Tensor:
        """The noise (steps, N, ...) of this process's envs; seed None: from torch's global
        generator."""
        ...


class HostNoise:
    """The noise as numpy arrays (host collection): numpy's PCG64 from the seed."""

    def __init__(self, policy: ActorCritic, envs: EnvSlice) -> None:
        self.policy, self.envs = policy, envs

    def draw(self, steps: int, seed: int | None) -> np.ndarray:
        """The noise (steps, N, ...), float32."""
        policy, envs = self.policy, self.envs
        shape = (policy.spec.action_dim,) if policy.is_gaussian else ()
        if seed is None:
            noise = policy.sample_noise(steps * envs.count, torch.device("cpu"))
            return noise.reshape(steps, envs.count, *shape).numpy()
        # numpy's PCG64 behind a SeedSequence: a fresh, high-quality stream per rollout.
        rng = np.random.Generator(np.random.PCG64(seed))
        full = (steps, envs.total, *shape)
        every = (
            rng.standard_normal(full, dtype=np.float32)
            if policy.is_gaussian
            else rng.random(full, dtype=np.float32)
        )
        return np.ascontiguousarray(every[:, envs.offset : envs.offset + envs.count])


class DeviceNoise:
    """The noise as tensors on `device` (device collection), from the device's generator."""

    def __init__(self, policy: ActorCritic, envs: EnvSlice, device: torch.device) -> None:
        self.policy, self.envs, self.device = policy, envs, device

    def draw(self, steps: int, seed: int | None) -> torch.Tensor:
        """The noise (steps, N, ...); the noise of global env k at step t depends on
        (seed, t, k, total) and the device's generator only."""
        envs = self.envs
        if seed is None:
            seed = int(torch.randint(2**62, ()).item())
        generator = torch.Generator(self.device).manual_seed(seed)
        every = self.policy.sample_noise(steps * envs.total, self.device, generator)
        every = every.reshape(steps, envs.total, *every.shape[1:])
        return every[:, envs.offset : envs.offset + envs.count]
