"""Learning tests: fixed seed, thresholds with margin, CPU only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied_ppo.checkpoint import load_checkpoint
from embodied_ppo.config import load_config
from embodied_ppo.envs import VecEnv
from embodied_ppo.modules import ActorCritic
from embodied_ppo.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

pytestmark = pytest.mark.learning


def greedy_return(policy: ActorCritic, cfg, episodes: int = 8, seed: int = 12345) -> float:
    """Mean return of the deterministic policy over `episodes` fresh episodes (one per env)."""
    cfg.env.num_envs = episodes
    returns = np.full(episodes, np.nan)
    with VecEnv(cfg.env, seed) as envs, torch.no_grad():
        obs = envs.reset()
        while np.isnan(returns).any():
            action, _, _ = policy.act(torch.from_numpy(obs), deterministic=True)
            res = envs.step(action.numpy())
            ended = np.flatnonzero(res.terminated | res.truncated)
            for i, k in enumerate(ended):
                if np.isnan(returns[k]):
                    returns[k] = res.episode_returns[i]
            obs = res.obs
    return float(returns.mean())


def train_config(name: str, tmp_path: Path, *overrides: str) -> Trainer:
    cfg = load_config(
        CONFIGS / name, [f"trainer.run_dir={tmp_path}", "trainer.device=cpu", *overrides]
    )
    trainer = Trainer(cfg, tmp_path)
    trainer.train()
    return trainer


def test_cartpole_solves_within_100k_steps(tmp_path):
    trainer = train_config("cartpole.yaml", tmp_path)
    assert trainer.global_step <= 100_000 + trainer.cfg.batch_size
    assert greedy_return(trainer.policy, trainer.cfg) >= 475.0


def test_pendulum_learns_within_200k_steps(tmp_path):
    trainer = train_config("pendulum.yaml", tmp_path)
    assert trainer.global_step <= 200_000 + trainer.cfg.batch_size
    assert np.mean(list(trainer.recent_returns)[-20:]) >= -300.0
    assert greedy_return(trainer.policy, trainer.cfg) >= -300.0


def test_humanoid_smoke_run_writes_a_loadable_checkpoint(tmp_path):
    trainer = train_config(
        "humanoid.yaml",
        tmp_path,
        "env.num_envs=2",
        "algorithm.rollout_steps=64",
        "algorithm.minibatch_size=64",
        "algorithm.update_epochs=2",
        "trainer.total_steps=256",
    )
    assert trainer.iteration == 2
    state = load_checkpoint(tmp_path)
    policy = ActorCritic(state["model_spec"])
    policy.load_state_dict(state["model"])
    assert state["model_spec"]["obs_dim"] == 348 and state["model_spec"]["action_dim"] == 17
    action, _, _ = policy.act(torch.zeros(1, 348), deterministic=True)
    assert action.shape == (1, 17) and torch.isfinite(action).all()
