"""Helpers the tests of several folders share (the tests folder is on sys.path)."""

from __future__ import annotations

from pathlib import Path

import torch

from embodied_ppo.algo.losses import ppo_loss
from embodied_ppo.algo.reward_scaling import RewardScaler
from embodied_ppo.algo.settings import UpdateSettings
from embodied_ppo.algo.update import PPOUpdate
from embodied_ppo.config.schema import AlgorithmConfig, OptimConfig
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.buffer import BufferLayout, RolloutBuffer
from embodied_ppo.runner.build import policy_spec
from embodied_ppo.runner.collector import Collector, CollectorSettings
from embodied_ppo.runner.preflight import inference_path
from embodied_ppo.vecenv.gym_backend import GymnasiumVecEnv

ROOT = Path(__file__).resolve().parents[1]  # the repository


def spec(kind="gaussian", **kw):
    s = {
        "obs_dim": 5,
        "action_kind": kind,
        "action_dim": 3,
        "action_low": [-1.0, -2.0, -0.5] if kind == "gaussian" else None,
        "action_high": [1.0, 2.0, 0.5] if kind == "gaussian" else None,
        "hidden_sizes": [32, 16],
        "activation": "tanh",
        "share_backbone": True,
        "log_std_init": -0.3,
        "state_dependent_std": False,
        "init": "orthogonal",
        "normalize_obs": True,
        "clip_obs": 10.0,
        "env_id": "test",
    }
    s.update(kw)
    return s


def random_batch(kind="gaussian", n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    actions = (
        torch.randn(n, 3, generator=g)
        if kind == "gaussian"
        else torch.randint(0, 3, (n,), generator=g)
    )
    return {
        "obs": torch.randn(n, 5, generator=g),
        "actions": actions,
        "logprobs": torch.randn(n, generator=g) * 0.1 - 3.0,
        "values": torch.randn(n, generator=g),
        "advantages": torch.randn(n, generator=g),
        "returns": torch.randn(n, generator=g),
        "mask": torch.ones(n),
    }


def make_update(
    kind="gaussian", micro=None, algo_kw=None, optim_kw=None, seed=0, compile=False, batch=None
):
    """Run one update of 3 epochs over a random batch; returns (policy, metrics)."""
    torch.manual_seed(seed)
    policy = ActorCritic(spec(kind))
    policy.obs_normalizer.update(torch.randn(100, 5) * 3)
    algo_kw = {"minibatch_size": 16, "update_epochs": 3, **(algo_kw or {})}
    algo = AlgorithmConfig(micro_batch_size=micro, entropy_bonus=0.01, clip_ratio_c=3.0, **algo_kw)
    optim = OptimConfig(lr=1e-3, **(optim_kw or {}))
    upd = PPOUpdate(
        policy,
        torch.Generator().manual_seed(1),
        UpdateSettings(algo, optim, compile=compile),
    )
    metrics = upd.update(batch if batch is not None else random_batch(kind), 8)
    return policy, metrics


def actor_critic_loss(
    logprob, old_logprob, advantages, values, old_values, returns, entropy, *, denom=None, **kw
):
    """ppo_loss with token-mean weights: every token counts 1 / denom (default: the batch size)."""
    weights = torch.full_like(advantages, 1.0 / (denom or advantages.shape[0]))
    return ppo_loss(
        logprob,
        old_logprob,
        advantages,
        entropy,
        weights,
        values=values,
        old_values=old_values,
        returns=returns,
        **kw,
    )


KW = dict(
    clip_ratio_low=0.2,
    clip_ratio_high=0.3,
    clip_ratio_c=None,
    value_clip=None,
    huber_delta=None,
    entropy_bonus=0.0,
    value_loss_coef=0.0,
)


CPU = torch.device("cpu")


def build(cfg, micro=None, inference="auto"):
    torch.manual_seed(cfg.trainer.seed)
    envs = GymnasiumVecEnv(cfg.env, cfg.trainer.seed)
    policy = ActorCritic(policy_spec(cfg, envs.info))
    gaussian = envs.info.action_kind == "gaussian"
    layout = BufferLayout(
        cfg.algorithm.rollout_steps,
        cfg.env.num_envs,
        envs.info.obs_dim,
        (envs.info.action_dim,) if gaussian else (),
        torch.float32 if gaussian else torch.int64,
    )
    buf = RolloutBuffer(layout, CPU)
    scaler = RewardScaler(
        cfg.env.num_envs, cfg.algorithm.gamma, cfg.env.normalize_reward, cfg.env.clip_reward
    )
    path = inference_path(inference, policy, cfg.env.num_envs)
    col = Collector(envs, policy, buf, scaler, CollectorSettings(CPU, path, micro))
    col.start()
    return envs, policy, buf, col
