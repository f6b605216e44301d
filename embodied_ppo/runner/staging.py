"""A rollout staged on the host, (T, N, ...) numpy arrays written step by step and copied to
the rollout buffer once per rollout (one host -> device copy per field)."""

from __future__ import annotations

import numpy as np
import torch

from embodied_ppo.core.obs import map_obs
from embodied_ppo.runner.buffer import RolloutBuffer
from embodied_ppo.vecenv.spaces import Obs, SpaceInfo, obs_zeros


class Staging:
    """The fields of one rollout on the host, named as the buffer's.

    Args:
        info: the env's spaces (the observation layout).
        shape: (T, N), the rollout's steps and envs.
        gaussian: Box actions (float32, `action_shape`), else Discrete (int64).
        state_size: a recurrent policy's state size (its states and episode starts are staged).
    """

    def __init__(
        self,
        info: SpaceInfo,
        shape: tuple[int, int],
        action_shape: tuple[int, ...],
        *,
        gaussian: bool,
        state_size: int = 0,
    ) -> None:
        T, N = shape
        self.steps, self.num_envs = T, N
        self.obs: Obs = obs_zeros(info, T, N)
        self.actions = np.zeros((T, N, *action_shape), dtype=np.float32 if gaussian else np.int64)
        self.logprobs = np.zeros((T, N), dtype=np.float32)
        self.values = np.zeros((T, N), dtype=np.float32)
        self.final_values = np.zeros((T, N), dtype=np.float32)
        self.truncated = np.zeros((T, N), dtype=bool)
        self.rewards = np.zeros((T, N), dtype=np.float32)
        self.terminated = np.zeros((T, N), dtype=bool)
        self.ends = np.zeros((T, N), dtype=bool)
        self.mask = np.ones((T, N), dtype=bool)
        self.fields = ["obs", "actions", "logprobs", "values", "final_values", "truncated"]
        self.fields += ["rewards", "terminated", "ends", "mask"]
        if state_size:
            self.states = np.zeros((T, N, state_size), dtype=np.float32)
            self.starts = np.zeros((T, N), dtype=np.float32)
            self.fields += ["states", "starts"]

    def clear(self) -> None:
        """Before a rollout: no episode ended, every step counts, no bootstrap value yet."""
        self.ends.fill(False)
        self.truncated.fill(False)
        self.mask.fill(True)
        self.final_values.fill(0.0)

    def flat(self, array: np.ndarray | dict[str, np.ndarray], steps: int) -> Obs:
        """The first `steps` steps of a staged field with (T, N) flattened to rows."""
        N = self.num_envs
        return map_obs(lambda a: a[:steps].reshape(steps * N, *a.shape[2:]), array)

    def make_tail_inert(self, steps: int) -> None:
        """The unused steps after an episodic rollout ended: finite and inert (terminated)."""
        for name in ("obs", "actions", "logprobs", "values", "rewards"):
            map_obs(lambda a: a[steps:].fill(0), getattr(self, name))
        self.terminated[steps:] = True

    def copy_to(self, buffer: RolloutBuffer) -> None:
        """Copy every staged field into `buffer` (pinned, asynchronous on a GPU)."""
        device = buffer.device
        for name in self.fields:
            array, target = getattr(self, name), getattr(buffer, name)
            for key, part in array.items() if isinstance(array, dict) else [(None, array)]:
                source = torch.from_numpy(part)
                if device.type != "cpu":
                    source = source.pin_memory()
                (target if key is None else target[key]).copy_(source, non_blocking=True)
