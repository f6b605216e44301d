"""Learning tests: fixed seed, thresholds with margin, CPU only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support import ROOT

from embodied_ppo.config.loading import load_config
from embodied_ppo.config.schema import with_values
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv as VecEnv

CONFIGS = ROOT / "configs"

pytestmark = pytest.mark.learning


def greedy_return(policy: ActorCritic, cfg, episodes: int = 8, seed: int = 12345) -> float:
    """Mean return of the deterministic policy over `episodes` fresh episodes (one per env)."""
    cfg = with_values(cfg, env__num_envs=episodes)
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


def test_grpo_improves_cartpole(tmp_path):
    trainer = train_config("cartpole_grpo.yaml", tmp_path, "trainer.total_steps=50000")
    import json

    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    first, last = records[0]["charts/episodic_return"], records[-1]["charts/episodic_return"]
    greedy = greedy_return(trainer.policy, trainer.cfg)
    print(f"grpo cartpole: first {first:.1f}, last {last:.1f}, greedy {greedy:.1f}")
    assert first < 40.0  # a random policy balances for about 20 steps
    assert last >= 150.0 and greedy >= 150.0


def mean_logged(run_dir: Path, tag: str) -> float:
    import json

    values = [json.loads(x)[tag] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return float(np.mean(values))


def test_kl_loss_keeps_a_fine_tuned_policy_closer_to_its_reference(tmp_path):
    pre = train_config("cartpole.yaml", tmp_path / "pre", "trainer.total_steps=20000")
    common = [
        f"model.init_from={pre.run_dir}",
        "algorithm.use_kl_loss=true",
        "algorithm.kl_loss_type=full",
        "optim.lr=0.003",
        "optim.schedule=constant",
        "trainer.total_steps=12800",
        "algorithm.early_stop_kl=null",  # the KL loss alone holds the policy back here
    ]
    free = train_config("cartpole.yaml", tmp_path / "free", *common, "algorithm.kl_loss_coef=0.0")
    held = train_config("cartpole.yaml", tmp_path / "held", *common, "algorithm.kl_loss_coef=1.0")
    kl_free = mean_logged(free.run_dir, "losses/kl_loss")
    kl_held = mean_logged(held.run_dir, "losses/kl_loss")
    assert kl_held < 0.5 * kl_free
