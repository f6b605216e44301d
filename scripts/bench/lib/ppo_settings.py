"""The hyperparameters our PPO and Stable-Baselines3's share in a side-by-side timing, as one
plain dict (it travels to the workers as JSON), and our config built from it.

From a config (`from_config`) every learning setting is the config's; from the command line
(`from_args`) a small MLP on one task with the usual PPO defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def from_config(path: str | Path) -> dict[str, Any]:
    """The shared settings of an embodied-ppo config."""
    from embodied_ppo.config.loading import load_config

    cfg = load_config(path)
    return {
        "env": cfg.env.id,
        "num_envs": cfg.env.num_envs,
        "rollout_steps": cfg.algorithm.rollout_steps,
        "minibatch_size": cfg.algorithm.minibatch_size,
        "epochs": cfg.algorithm.update_epochs,
        "hidden": list(cfg.model.hidden_sizes),
        "activation": cfg.model.activation,
        "share_backbone": cfg.model.share_backbone,
        "log_std_init": cfg.model.log_std_init,
        "lr": cfg.optim.lr,
        "schedule": cfg.optim.schedule,
        "gamma": cfg.algorithm.gamma,
        "gae_lambda": cfg.algorithm.gae_lambda,
        "value_clip": cfg.algorithm.value_clip,
        "huber_delta": cfg.algorithm.huber_delta,
        "max_grad_norm": cfg.optim.max_grad_norm,
        "backend": cfg.env.backend,
        "env_threads": cfg.env.threads,
        "env_processes": cfg.env.processes,
        "early_stop_kl": cfg.algorithm.early_stop_kl,
    }


def from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The shared settings of the command line's task and MLP (--config absent)."""
    return {
        "env": args.env,
        "num_envs": args.num_envs,
        "rollout_steps": args.rollout_steps // args.num_envs,
        "minibatch_size": args.minibatch_size,
        "epochs": args.epochs,
        "hidden": args.hidden,
        "activation": "tanh",
        "share_backbone": False,
        "log_std_init": 0.0,
        "lr": 3e-4,
        "schedule": "constant",
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "value_clip": None,
        "huber_delta": None,
        "max_grad_norm": 0.5,
        "backend": args.backend,
        "env_threads": args.env_threads,
        "env_processes": args.env_processes,
        "early_stop_kl": None,
    }


def ours_config(s: dict[str, Any], iterations: int, run_dir: str, threads: int | None):
    """Our Config for `iterations` iterations of the shared settings `s` (its `device`, cpu
    by default), the run written to `run_dir`, `threads` torch threads (None: its own)."""
    from embodied_ppo.config.building import from_dict

    return from_dict(
        {
            "env": {
                "id": s["env"],
                "num_envs": s["num_envs"],
                "backend": s["backend"],
                "threads": s["env_threads"],
                "processes": s.get("env_processes", 1),
                "normalize_obs": True,
                "normalize_reward": True,
            },
            "model": {
                "hidden_sizes": s["hidden"],
                "activation": s["activation"],
                "share_backbone": s["share_backbone"],
                "log_std_init": s["log_std_init"],
            },
            "algorithm": {
                "rollout_steps": s["rollout_steps"],
                "minibatch_size": s["minibatch_size"],
                "update_epochs": s["epochs"],
                "gamma": s["gamma"],
                "gae_lambda": s["gae_lambda"],
                "value_clip": s["value_clip"],
                "huber_delta": s["huber_delta"],
                "early_stop_kl": s.get("early_stop_kl"),
                "entropy_bonus": 0.0,
            },
            "optim": {
                "lr": s["lr"],
                "schedule": s.get("schedule", "constant"),
                "max_grad_norm": s["max_grad_norm"],
            },
            "trainer": {
                "total_steps": iterations * s["rollout_steps"] * s["num_envs"],
                "device": s.get("device", "cpu"),
                "run_dir": run_dir,
                "checkpoint_interval": 10**9,
                "torch_threads": threads,
            },
        }
    )
