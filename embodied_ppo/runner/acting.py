"""How collection runs the policy: actions, log-probabilities and values for every env.

The policy acts through a numpy snapshot of itself on the host (far less overhead for the small
batches of a rollout) or through the torch module on the training device, in micro-batches of
envs (`algorithm.rollout_micro_batch_size`). All of a rollout's sampling noise is drawn at once,
so neither the chunking nor the path changes a sample (docs/design.md, rule 3). A snapshot that
does not compute what the module computes is refused (`model.snapshot.SnapshotMismatch`) and the
module acts instead, after one note.
"""

from __future__ import annotations

import sys
from typing import TextIO

import numpy as np
import torch

from embodied_ppo.core.obs import map_obs, obs_rows
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.snapshot import NumpyPolicy, SnapshotMismatch
from embodied_ppo.vecenv.spaces import Obs

# Rows per forward pass when a separate critic values a whole rollout after it.
VALUE_BATCH_ROWS = 4096

Tensors = torch.Tensor | dict[str, torch.Tensor]


def rollout_noise(
    policy: ActorCritic,
    steps: int,
    num_envs: int,
    seed: int | None,
    env_offset: int = 0,
    total_envs: int | None = None,
) -> np.ndarray:
    """The sampling noise of a whole rollout (T, N, ...): standard normal for a Gaussian head,
    uniform for a categorical one.

    With `seed`, the noise of global env k at step t is a pure function of (seed, t, k),
    whatever the number of processes; without it, it comes from torch's global generator.
    """
    shape = (policy.spec.action_dim,) if policy.is_gaussian else ()
    if seed is None:
        noise = policy.sample_noise(steps * num_envs, torch.device("cpu"))
        return noise.reshape(steps, num_envs, *shape).numpy()
    # numpy's PCG64 behind a SeedSequence: a fresh, high-quality stream per rollout.
    rng = np.random.Generator(np.random.PCG64(seed))
    full = (steps, total_envs or num_envs, *shape)
    every = (
        rng.standard_normal(full, dtype=np.float32)
        if policy.is_gaussian
        else rng.random(full, dtype=np.float32)
    )
    return np.ascontiguousarray(every[:, env_offset : env_offset + num_envs])


class Acting:
    """The policy as collection runs it, for one rollout at a time.

    Args:
        host: act through the numpy snapshot (False: the torch module on `device`).
        micro_batch: at most this many envs per forward pass (None: all of them).
        notes: where the one note of a refused snapshot goes.
    """

    def __init__(
        self,
        policy: ActorCritic,
        device: torch.device,
        host: bool,
        micro_batch: int | None,
        notes: TextIO | None = None,
    ) -> None:
        self.policy, self.device, self.host = policy, device, host
        self.micro_batch = micro_batch
        self.notes = notes
        self.snapshot: NumpyPolicy | None = None

    def begin(self) -> None:
        """Take the snapshot of the policy as it is now (the policy is fixed during a
        rollout); after a refused snapshot, the module acts for the rest of the run."""
        self.snapshot = None
        if not self.host:
            return
        try:
            self.snapshot = NumpyPolicy(self.policy)
        except SnapshotMismatch as exc:
            self.host = False
            print(
                f"note: trainer.inference: {exc}; the policy acts in torch",
                file=self.notes or sys.stderr,
            )

    @property
    def late_values(self) -> bool:
        """Whether a separate critic's values are left out while acting (then computed after
        the rollout in large batches)."""
        return self.snapshot is not None and self.snapshot.separate_critic

    def noise_terms(self, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """A state-independent Gaussian's (std x noise, log-prob) for the whole rollout."""
        return None if self.snapshot is None else self.snapshot.noise_terms(noise)

    # ------------------------------------------------------------------ acting
    def _chunks(self, n: int) -> list[slice]:
        size = self.micro_batch or n
        return [slice(i, i + size) for i in range(0, n, size)]

    def tensors(self, obs: Obs) -> Tensors:
        """An observation batch on the training device."""
        return map_obs(lambda x: torch.from_numpy(x).to(self.device), obs)

    def act(
        self,
        obs: Obs,
        noise: np.ndarray,
        with_value: bool,
        terms: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(action, log-prob, value or None) for every env (B, ...), from its noise."""
        snapshot = self.snapshot
        if snapshot is not None and (self.micro_batch or len(noise)) >= len(noise):
            return snapshot.act(obs, noise, with_value, terms)  # one forward pass
        parts = []
        for c in self._chunks(obs_rows(obs)):
            if snapshot is not None:
                part = None if terms is None else (terms[0][c], terms[1][c])
                parts.append(snapshot.act(obs[c], noise[c], with_value, part))
            else:
                x = self.tensors(map_obs(lambda a, c=c: a[c], obs))
                noise_c = torch.from_numpy(noise[c]).to(self.device)
                action, logprob, value = self.policy.act(x, noise_c)
                parts.append((action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy()))
        if len(parts) == 1:
            return parts[0]
        action, logprob, value = zip(*parts, strict=True)
        return (
            np.concatenate(action),
            np.concatenate(logprob),
            None if value[0] is None else np.concatenate(value),
        )

    def act_recurrent(
        self, obs: Obs, noise: np.ndarray, state: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor]:
        """(action, log-prob, value, new state) of a recurrent policy for every env."""
        parts = []
        for c in self._chunks(obs_rows(obs)):
            x = self.tensors(map_obs(lambda a, c=c: a[c], obs))
            dist, value, new_state = self.policy.step(x, state[c])
            action = dist.sample(torch.from_numpy(noise[c]).to(self.device))
            parts.append((action, dist.log_prob(action), value, new_state))
        action, logprob, value, new_state = (torch.cat(p) for p in zip(*parts, strict=True))
        return action.cpu().numpy(), logprob.cpu().numpy(), value.cpu().numpy(), new_state

    # ------------------------------------------------------------------ values
    def values(self, obs: Obs, rows: int | None = None) -> np.ndarray:
        """Values of observations (B, ...), at most `rows` per forward pass (default: the
        micro-batch of envs)."""
        rows = rows or self.micro_batch or obs_rows(obs)
        parts = []
        for i in range(0, obs_rows(obs), rows):
            part = map_obs(lambda a, i=i: a[i : i + rows], obs)
            if self.snapshot is not None:
                parts.append(self.snapshot.value(part))
            else:
                parts.append(self.policy.value(self.tensors(part)).cpu().numpy())
        return np.concatenate(parts)

    def recurrent_values(self, obs: Obs, state: torch.Tensor) -> np.ndarray:
        """Values of observations (B, ...) under the recurrent states (B, S) that reached them."""
        parts = []
        for c in self._chunks(obs_rows(obs)):
            x = self.tensors(map_obs(lambda a, c=c: a[c], obs))
            parts.append(self.policy.step(x, state[c])[1].cpu().numpy())
        return np.concatenate(parts)
