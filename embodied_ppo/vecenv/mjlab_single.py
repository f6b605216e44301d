"""One mjlab env as a Gymnasium env, for evaluation and videos (`eval`, trainer.eval_interval).

A batch of one on the CPU, built from the same task config as training (with env.kwargs and
env.max_episode_steps): evaluation runs the task the policy was trained on. Episodes end as in
training (terminated: a fall; truncated: the time
limit), and the last step's info carries mjlab's episode log (reward terms, metrics) under
"log".

mjlab draws its random numbers from the global generators, which the training run also uses:
this env keeps generators of its own and swaps them in around every call, so evaluating during
training does not change the run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from embodied_ppo.config.schema import EnvConfig
from embodied_ppo.vecenv.mjlab_tasks import build, gym_spaces, quietly, task_config


class MjlabSingleEnv(gym.Env):
    """The task of an `env:` block with backend mjlab, one env on the CPU, as a Gymnasium env."""

    def __init__(self, cfg: EnvConfig, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.cfg = cfg
        with self._own_rng(fresh=0):
            self.env: Any = build(task_config(cfg, 1, 0), torch.device("cpu"), render_mode)
        self.observation_space, self.action_space = gym_spaces(self.env, str(cfg.id))
        self.metadata = {
            "render_modes": ["rgb_array"],
            "render_fps": 1.0 / float(self.env.step_dt),
        }
        self._frame: np.ndarray | None = None  # the last frame of an episode that ended

    @contextmanager
    def _own_rng(self, fresh: int | None = None) -> Iterator[None]:
        """Run with this env's generators in place of the global ones (`fresh`: seeded anew)."""
        outer = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        if fresh is not None:
            random.seed(fresh)
            np.random.seed(fresh % 2**32)
            torch.manual_seed(fresh)
        else:
            random.setstate(self._state[0])
            np.random.set_state(self._state[1])
            torch.set_rng_state(self._state[2])
        try:
            yield
        finally:
            self._state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            random.setstate(outer[0])
            np.random.set_state(outer[1])
            torch.set_rng_state(outer[2])

    def _obs(self, obs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        return {k: obs[k][0].cpu().numpy().copy() for k in self.observation_space.spaces}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode (mjlab seeded with `seed` when given)."""
        super().reset(seed=seed)
        self._frame = None
        with self._own_rng():
            s = None if seed is None else int(seed) % 2**32
            obs, _ = quietly(self.env.reset, seed=s)
        return self._obs(obs), {}

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """One step; at an episode's end, the info's "log" holds mjlab's episode log."""
        with self._own_rng():
            act = torch.as_tensor(np.asarray(action, dtype=np.float32)).reshape(1, -1)
            obs, reward, terminated, truncated, _ = self.env.step(act)
            term, trunc = bool(terminated[0]), bool(truncated[0])
            info: dict[str, Any] = {}
            out = self._obs(obs)
            if term or trunc:
                if self.render_mode == "rgb_array":
                    self._frame = self.env.render()  # before the reset that reads the log
                _, extras = self.env.reset(env_ids=torch.zeros(1, dtype=torch.int64))
                info["log"] = {str(k): float(v) for k, v in extras.get("log", {}).items()}
        return out, float(reward[0]), term, trunc, info

    def render(self) -> np.ndarray | None:
        """The current frame (H, W, 3) uint8 (the last frame of an episode that just ended)."""
        if self._frame is not None:
            return _one(self._frame)
        return _one(self.env.render())

    def close(self) -> None:
        """Close mjlab's env and its renderer."""
        if getattr(self, "env", None) is not None:
            self.env.close()
            self.env = None


def _one(frame: np.ndarray | None) -> np.ndarray | None:
    """One env's frame of a batch's rendering."""
    if frame is not None and frame.ndim == 4:
        return frame[0]
    return frame
