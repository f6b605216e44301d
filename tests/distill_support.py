"""Teachers and students on the goal task (toy_envs.GoalEnv), for the distillation tests."""

from __future__ import annotations

import io
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from conftest import tiny_config
from toy_envs import register_goal

from embodied_ppo.algo.batch import prepare_batch
from embodied_ppo.config.schema import Config
from embodied_ppo.runner.trainer import Trainer

GOAL = register_goal()

# A teacher reads the privileged goal; a student reads its position alone.
TEACHER_KEYS = ["position", "goal"]
STUDENT_KEYS = ["position"]
GOAL_KEYS = ["goal", "position", "teacher"]


def train(cfg: Config, run_dir: Path) -> Trainer:
    """Train `cfg` into `run_dir`; the finished trainer."""
    trainer = Trainer(cfg, run_dir, progress_stream=io.StringIO())
    trainer.train()
    return trainer


def prepared(trainer: Trainer) -> partial:
    """What prepares PPO's batch of the trainer's rollout, as the trainer's iteration does."""
    a = trainer.cfg.algorithm
    return partial(
        prepare_batch, trainer.buffer, trainer.policy, a, trainer.in_reward_kl, trainer.reduce
    )


def chunked_means(student, buf, length: int) -> torch.Tensor:
    """A recurrent `student`'s mean actions over rollout `buf`, each env's rows in order
    (rows n*T + t), stepped one step at a time: each chunk of `length` steps from the state
    stored before its first step (no gradient before it), a fresh state at an episode start."""
    T, N = buf.starts.shape
    means = []
    for n in range(N):
        for t in range(T):
            if t % length == 0:
                state = buf.states[t, n : n + 1].clone()
            if buf.starts[t, n]:
                state = torch.zeros_like(state)
            obs = {k: v[t, n : n + 1] for k, v in buf.obs.items()}
            dist, _, state = student.step(obs, state)
            means.append(dist.mean)
    return torch.cat(means)


def teacher_config(seed: int = 0, keys: list[str] | None = None) -> Config:
    """PPO on the goal task, 4 envs x 8 steps, its actor reading the goal: 96 steps."""
    return tiny_config(
        GOAL,
        env={"num_envs": 4},
        model={"hidden_sizes": [16], "actor_obs_keys": keys or TEACHER_KEYS},
        algorithm={"rollout_steps": 8, "minibatch_size": 16, "update_epochs": 4},
        optim={"lr": 3e-3},
        trainer={"total_steps": 96, "seed": seed},
    )


def make_teacher(run_dir: Path, seed: int = 0, keys: list[str] | None = None) -> Path:
    """A trained teacher run."""
    train(teacher_config(seed, keys), run_dir)
    return run_dir


def student_config(teachers: list[Path], **blocks: dict) -> Config:
    """A blind student of `teachers`: 4 envs x 8 steps, its actor reading its position (its
    critic the goal too, ready for a fine-tune), two minibatches, 64 steps."""
    data: dict = {
        "env": {"num_envs": 4},
        "model": {
            "hidden_sizes": [16],
            "actor_obs_keys": STUDENT_KEYS,
            "critic_obs_keys": TEACHER_KEYS,
            "share_backbone": False,
            "log_std_init": -1.0,
        },
        "algorithm": {"rollout_steps": 8, "minibatch_size": 16, "update_epochs": 2},
        "optim": {"lr": 3e-3},
        "trainer": {"total_steps": 64},
    }
    for block, values in blocks.items():
        data.setdefault(block, {}).update(values)
    distill = {"teachers": [str(t) for t in teachers], **data.pop("distill", {})}
    return tiny_config(GOAL, distill=distill, **data)


class RecordActions(gym.Wrapper):
    """Keeps every (observation, action) the env is given, per env (in this process)."""

    seen: list[RecordActions] = []

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.records: list[tuple[dict, object]] = []
        self.obs = None
        RecordActions.seen.append(self)

    def reset(self, **kwargs):
        self.obs, info = self.env.reset(**kwargs)
        return self.obs, info

    def step(self, action):
        self.records.append((self.obs, np.array(action, dtype=np.float32)))  # not a view
        self.obs, *rest = self.env.step(action)
        return (self.obs, *rest)
