"""The quadruped tasks as a Gymnasium vector env: N envs stepped together on arrays
(`quadruped_batch.QuadrupedBatch`), each env exactly as `quadruped.QuadrupedEnv` steps it.

It is the tasks' `vector_entry_point`: `gymnasium.make_vec("EmbodiedPPO/QuadrupedFlat-v0", 64,
vectorization_mode="vector_entry_point")` makes one, and embodied-ppo's sync backend steps it
in place of 64 env objects (`env.batched`, docs/environments.md). Episodes that end are reset
in the step that ends them (SAME_STEP autoreset): `info["final_obs"][i]` is env i's last
observation, `info["final_info"]["log"][i]` its episode's log, and the observation returned
is its next episode's first. The time limit (`max_episode_steps`, gymnasium's TimeLimit's
rule) truncates episodes here.

Exact resume: `state_dicts()` gives each env's state (the single env's `state_dict()` and its
time-limit counter) and `load_state_dicts` restores them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from embodied_ppo_envs.quadruped import PROGRESS_METRICS, action_space
from embodied_ppo_envs.quadruped_batch import QuadrupedBatch
from embodied_ppo_envs.quadruped_observations import observation_space
from embodied_ppo_envs.quadruped_settings import parse_settings
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space


class QuadrupedVectorEnv(gym.vector.VectorEnv):
    """`num_envs` quadrupeds (the task's arguments: `quadruped.QuadrupedEnv`'s).

    Args:
        num_envs: N.
        max_episode_steps: the time limit in policy steps (None: none).
        threads: threads stepping the physics (MuJoCo releases Python's GIL while it steps).
    """

    # member_exact: env i steps exactly as QuadrupedEnv does with env i's seed (the contract of
    # embodied_ppo.vecenv.task_vector).
    metadata = {
        "autoreset_mode": AutoresetMode.SAME_STEP,
        "member_exact": True,
        "progress_metrics": PROGRESS_METRICS,
    }

    def __init__(
        self,
        num_envs: int,
        *,
        max_episode_steps: int | None = None,
        threads: int = 1,
        **task: Any,
    ) -> None:
        self.settings = parse_settings(**task)
        self.batch = QuadrupedBatch(self.settings, num_envs, threads)
        self.num_envs = num_envs
        self.single_observation_space = observation_space()
        self.single_action_space = action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.max_episode_steps = max_episode_steps
        self.elapsed = np.zeros(num_envs, dtype=np.int64)  # steps into each episode
        self.render_mode = None

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every env: env i with seed[i] (an int seed gives seed + i), or unseeded."""
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        self.elapsed[:] = 0
        obs = self.batch.reset_rows(list(range(self.num_envs)), seeds)
        return obs, {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env; ended episodes are reset in the same step (see the module)."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs, 12):
            raise ValueError(
                f"expected actions of shape ({self.num_envs}, 12), got {actions.shape}"
            )
        obs, reward, terminated = self.batch.step(actions)
        self.elapsed += 1
        truncated = np.zeros(self.num_envs, dtype=bool)
        if self.max_episode_steps is not None:
            truncated = self.elapsed >= self.max_episode_steps
        ended = np.flatnonzero(terminated | truncated).tolist()
        info: dict[str, Any] = {}
        if ended:
            final: list[Any] = [None] * self.num_envs
            logs: list[Any] = [None] * self.num_envs
            for i in ended:
                final[i] = {k: v[i].copy() for k, v in obs.items()}
                logs[i] = self.batch.log(i)
            first = self.batch.reset_rows(ended, [None] * len(ended))
            for key, value in first.items():
                obs[key][ended] = value
            self.elapsed[ended] = 0
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[ended] = True
            info = {"final_obs": final, "_final_obs": mask, "final_info": {"log": logs}}
        return obs, reward, terminated.copy(), truncated, info

    def state_dicts(self) -> list[dict[str, Any]]:
        """Each env's mid-episode state, plain data (for a checkpoint)."""
        return [
            {**self.batch.state_dict(i), "elapsed": int(self.elapsed[i])}
            for i in range(self.num_envs)
        ]

    def load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """Restore `state_dicts()`, one state per env."""
        if len(states) != self.num_envs:
            raise ValueError(f"got {len(states)} states for {self.num_envs} envs")
        for i, state in enumerate(states):
            self.batch.load_state_dict(i, state)
            self.elapsed[i] = int(state["elapsed"])

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the physics threads."""
        self.batch.close()
