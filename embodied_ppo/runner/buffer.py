"""Rollout storage, preallocated on the training device, and the minibatch iterators."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from embodied_ppo.core.obs import map_obs

# The observations of a flat space: their size; of a Dict space: each key's shape and dtype
# (images stay uint8 in the buffer: 4x less memory than float32).
ObsLayout = int | dict[str, tuple[tuple[int, ...], torch.dtype]]


@dataclass(frozen=True)
class BufferLayout:
    """The shapes and dtypes of a rollout buffer.

    Attributes:
        num_steps, num_envs: T and N.
        obs: the observations' layout (see `ObsLayout`).
        action_shape, action_dtype: one action's shape and dtype ((A,) float32 for Box
            actions, () int64 for Discrete ones).
        state_size: a recurrent policy's state size (0: none).
    """

    num_steps: int
    num_envs: int
    obs: ObsLayout
    action_shape: tuple[int, ...] = ()
    action_dtype: torch.dtype = torch.float32
    state_size: int = 0


class RolloutBuffer:
    """Fixed-size (T, N, ...) storage for one rollout, on `device`.

    `next_values[t]` is the value of the state that followed step t: V(s_{t+1}) inside an episode,
    V(final_obs) on a truncation, anything on a termination (it is multiplied by 0 there).
    `states` and `starts` are a recurrent policy's state before each step and where episodes
    start (see Collector).
    """

    def __init__(self, layout: BufferLayout, device: torch.device) -> None:
        self.layout = layout
        num_steps, num_envs = layout.num_steps, layout.num_envs
        obs_layout, state_size = layout.obs, layout.state_size
        action_shape, action_dtype = layout.action_shape, layout.action_dtype
        self.num_steps, self.num_envs, self.device = num_steps, num_envs, device
        T, N = num_steps, num_envs

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            """A zero tensor on the buffer's device."""
            return torch.zeros(shape, dtype=dtype, device=device)

        # (T, N, obs_dim), or {key: (T, N, *shape)} for Dict observations
        self.obs: torch.Tensor | dict[str, torch.Tensor] = (
            zeros(T, N, obs_layout)
            if isinstance(obs_layout, int)
            else {k: zeros(T, N, *shape, dtype=dt) for k, (shape, dt) in obs_layout.items()}
        )
        self.actions = zeros(T, N, *action_shape, dtype=action_dtype)
        self.logprobs = zeros(T, N)
        self.values = zeros(T, N)
        self.next_values = zeros(T, N)
        self.final_values = zeros(T, N)  # V(final_obs) where the episode was truncated at step t
        self.truncated = zeros(T, N, dtype=torch.bool)  # truncated and not terminated at step t
        self.rewards = zeros(T, N)  # scaled rewards, what the learner optimizes
        self.terminated = zeros(T, N)  # 1.0 where the episode terminated at step t
        self.ends = zeros(T, N)  # 1.0 where the episode ended (terminated or truncated) at step t
        self.advantages = zeros(T, N)
        self.mask = torch.ones(T, N, device=device)  # 1.0 where the step counts in the loss
        self.returns = zeros(T, N)
        # Recurrent policies: the state before step t (already zeroed where an episode starts
        # at t), and 1.0 where one does. Empty (T, N, 0) for other policies.
        self.states = zeros(T, N, state_size)
        self.starts = zeros(T, N)
        # Kept only where advantages are recomputed during the update (Collector's
        # `keep_bootstrap_obs`): the observation after the last step (N, ...), and each
        # truncation's final observations (step t, env rows, obs (k, ...)).
        self.last_obs: torch.Tensor | dict[str, torch.Tensor] | None = None
        self.final_obs: list[tuple[int, torch.Tensor, torch.Tensor | dict[str, torch.Tensor]]] = []

    def keep_bootstrap_obs(
        self,
        last_obs: torch.Tensor | dict[str, torch.Tensor],
        final_obs: list[tuple[int, torch.Tensor, torch.Tensor | dict[str, torch.Tensor]]],
    ) -> None:
        """Keep the observation after the rollout's last step (N, ...) and each truncation's
        final observations (step t, env rows, obs (k, ...)), to value them again during the
        update (`algorithm.recompute_advantages`)."""
        self.last_obs, self.final_obs = last_obs, list(final_obs)

    def finalize_next_values(self, last_values: torch.Tensor) -> None:
        """Fill `next_values` from the stored values, V(s_T) = `last_values` and truncations."""
        self.next_values[:-1] = self.values[1:]
        self.next_values[-1] = last_values
        self.next_values.copy_(torch.where(self.truncated, self.final_values, self.next_values))

    @property
    def size(self) -> int:
        return self.num_steps * self.num_envs

    def flat(self, *names: str) -> dict[str, torch.Tensor | dict[str, torch.Tensor]]:
        """Views of the named fields with (T, N) flattened to (T*N,) (observations: per key)."""

        def flatten(x: torch.Tensor) -> torch.Tensor:
            """`x` (T, N, ...) viewed as (T*N, ...)."""
            return x.reshape(self.size, *x.shape[2:])

        return {n: map_obs(flatten, getattr(self, n)) for n in names}
