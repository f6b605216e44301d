"""Stable-Baselines3 PPO with RL Baselines3 Zoo's hyperparameters for a MuJoCo task: train (or
continue) one seed, then evaluate it on the test episodes; the MuJoCo benchmark's contender.

    python -m scripts.bench.workers.sb3_zoo --env Hopper-v5 --seed 100 --steps 1000000 \\
        --run runs/benchmark/hopper/sb3_seed100

The model and its normalizer are saved every --save-every steps under --run (with state.json:
the wall time so far), so an interrupted run continues from its last save; when the budget is
reached the policy is scored deterministically on the episodes of `embodied-ppo eval --seed
10000`, and state.json gains its evaluation and steps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.tasks import EVAL_SEED, family

# RL Baselines3 Zoo, hyperparams/ppo.yml: the tuned MuJoCo entries (written for -v3; used here
# unchanged on -v5). Ant has no tuned entry: the zoo trains it with PPO's defaults and
# VecNormalize. Every entry normalizes observations and rewards (VecNormalize, the entry's gamma).
RELU_256 = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
            "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
SB3_ZOO: dict[str, dict[str, Any]] = {
    "HalfCheetah": {"n_steps": 512, "batch_size": 64, "gamma": 0.98, "learning_rate": 2.0633e-05,
                    "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.92,
                    "max_grad_norm": 0.8, "vf_coef": 0.58096, "policy_kwargs": RELU_256},
    "Hopper": {"n_steps": 512, "batch_size": 32, "gamma": 0.999, "learning_rate": 9.80828e-05,
               "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
               "max_grad_norm": 0.7, "vf_coef": 0.835671, "policy_kwargs": RELU_256},
    "Walker2d": {"n_steps": 512, "batch_size": 32, "gamma": 0.99, "learning_rate": 5.05041e-05,
                 "ent_coef": 0.000585045, "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.95,
                 "max_grad_norm": 1.0, "vf_coef": 0.871923},
    "Ant": {},
    "Humanoid": {"n_steps": 512, "batch_size": 256, "gamma": 0.95, "learning_rate": 3.56987e-05,
                 "ent_coef": 0.00238306, "clip_range": 0.3, "n_epochs": 5, "gae_lambda": 0.9,
                 "max_grad_norm": 2.0, "vf_coef": 0.431892, "policy_kwargs": RELU_256},
}  # fmt: skip


def train_and_evaluate(
    env_id: str, seed: int, steps: int, run: Path, save_every: int, episodes: int
) -> None:
    """Train (or continue) Stable-Baselines3 PPO with the zoo's hyperparameters; evaluate."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from embodied_ppo.runner.episodes import eval_seeds

    torch.set_num_threads(1)  # its faster setting on 2 cores (scripts.bench.throughput)
    hp = dict(SB3_ZOO[family(env_id)])
    policy_kwargs = dict(hp.pop("policy_kwargs", {}))
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = {"relu": torch.nn.ReLU}[policy_kwargs["activation_fn"]]
    run.mkdir(parents=True, exist_ok=True)
    state_file, model_file, norm_file = run / "state.json", run / "model.zip", run / "norm.pkl"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"wall_s": 0.0}
    start = time.perf_counter()
    venv = make_vec_env(env_id, n_envs=1, seed=seed)
    if model_file.exists():
        env = VecNormalize.load(str(norm_file), venv)
        model = PPO.load(str(model_file), env=env, device="cpu")
    else:
        env = VecNormalize(venv, gamma=hp.get("gamma", 0.99))
        model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0,
                    policy_kwargs=policy_kwargs or None, **hp)  # fmt: skip
    while model.num_timesteps < steps:
        model.learn(min(save_every, steps - model.num_timesteps), reset_num_timesteps=False)
        model.save(str(model_file))
        env.save(str(norm_file))
        state["wall_s"] += time.perf_counter() - start
        start = time.perf_counter()
        state_file.write_text(json.dumps(state, indent=2) + "\n")
    env.training = False
    returns = []
    for episode_seed in eval_seeds(EVAL_SEED, episodes):
        e = gym.make(env_id)
        obs, _ = e.reset(seed=episode_seed)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(env.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, _ = e.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        e.close()
    state["eval"] = {"mean": float(np.mean(returns)), "std": float(np.std(returns))}
    state["steps"] = int(model.num_timesteps)
    state_file.write_text(json.dumps(state, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, train and evaluate."""
    p = cli_args.parser("scripts.bench.workers.sb3_zoo", __doc__)
    p.add_argument("--env", required=True, help="a MuJoCo task's id, e.g. Hopper-v5")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--run", type=Path, required=True, help="the run's folder")
    p.add_argument("--save-every", type=int, default=100_000)
    p.add_argument("--episodes", type=int, default=10)

    def body(a) -> None:
        if family(a.env) not in SB3_ZOO:
            raise cli_args.BadInput(f"--env {a.env}: no RL Zoo settings here")
        train_and_evaluate(a.env, a.seed, a.steps, a.run, a.save_every, a.episodes)

    return cli_args.run_main(p, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
