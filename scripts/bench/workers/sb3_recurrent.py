"""sb3-contrib's RecurrentPPO with RL Baselines3 Zoo's ppo_lstm settings for a memory task: train
one seed for a budget, then evaluate it deterministically on the test episodes; the memory
benchmark's contender (scripts.bench.recurrent).

    python -m scripts.bench.workers.sb3_recurrent --env EmbodiedPPO/CartPoleNoVel-v1 \\
        --seed 100 --steps 100000 --episodes 20

Prints {"wall_s", "returns", "mean"} as one JSON line: the training's wall time (the env's
creation included) and each test episode's return, the episodes of `embodied-ppo eval --seed
10000` with the recurrent state reset at each episode's start. One torch thread.
"""

from __future__ import annotations

import json
import time
from typing import Any

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.tasks import EVAL_SEED

# RL Baselines3 Zoo, hyperparams/ppo_lstm.yml, per task. "lin_X": a linear schedule from X to 0.
ZOO_LSTM: dict[str, dict[str, Any]] = {
    "EmbodiedPPO/CartPoleNoVel-v1": {  # the zoo's CartPoleNoVel-v1
        "n_envs": 8,
        "normalize": True,
        "kwargs": {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": "lin_0.001",
            "clip_range": "lin_0.2",
            "policy_kwargs": {"ortho_init": False, "lstm_hidden_size": 64},
        },
    },
    "EmbodiedPPO/PendulumNoVel-v1": {  # the zoo's PendulumNoVel-v1
        "n_envs": 4,
        "normalize": True,
        "kwargs": {
            "n_steps": 1024,
            "gae_lambda": 0.95,
            "gamma": 0.9,
            "n_epochs": 10,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "use_sde": True,
            "sde_sample_freq": 4,
            "policy_kwargs": {
                "ortho_init": False,
                "activation_fn": "relu",
                "lstm_hidden_size": 64,
                "enable_critic_lstm": True,
                "net_arch": {"pi": [64], "vf": [64]},
            },
        },
    },
}


def schedule(value: Any) -> Any:
    """The zoo's "lin_X" as a schedule falling linearly from X to 0; any other value as it is."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value[4:])
        return lambda progress: progress * start
    return value


def train_and_evaluate(env_id: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train RecurrentPPO on `env_id` for `steps`, evaluate it; the wall time and returns."""
    import embodied_ppo_envs  # noqa: F401  (registers the tasks)
    import gymnasium as gym
    import numpy as np
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from embodied_ppo.runner.episodes import eval_seeds

    spec = ZOO_LSTM[env_id]
    torch.set_num_threads(1)
    kw = dict(spec["kwargs"])
    for key in ("learning_rate", "clip_range"):
        kw[key] = schedule(kw[key])
    pk = dict(kw.pop("policy_kwargs"))
    if "activation_fn" in pk:
        pk["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[pk["activation_fn"]]
    start = time.perf_counter()
    env = make_vec_env(env_id, n_envs=spec["n_envs"], seed=seed)
    if spec["normalize"]:
        env = VecNormalize(env, gamma=kw["gamma"])
    model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", policy_kwargs=pk, **kw)
    model.learn(steps)
    wall = time.perf_counter() - start
    returns = []
    for episode_seed in eval_seeds(EVAL_SEED, episodes):  # `embodied-ppo eval --seed 10000`'s
        e = gym.make(env_id)
        obs, _ = e.reset(seed=episode_seed)
        state, start_flag, total, done = None, np.ones((1,), dtype=bool), 0.0, False
        while not done:
            x = env.normalize_obs(obs[None]) if spec["normalize"] else obs[None]
            action, state = model.predict(
                x, state=state, episode_start=start_flag, deterministic=True
            )
            obs, reward, terminated, truncated, _ = e.step(action[0])
            total += float(reward)
            start_flag = np.zeros((1,), dtype=bool)
            done = terminated or truncated
        returns.append(total)
    return {"wall_s": wall, "returns": returns, "mean": float(np.mean(returns))}


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, train, evaluate, print the JSON line."""
    p = cli_args.parser("scripts.bench.workers.sb3_recurrent", __doc__)
    p.add_argument("--env", required=True, choices=sorted(ZOO_LSTM))
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--episodes", type=int, default=20)
    return cli_args.run_main(
        p,
        lambda a: print(json.dumps(train_and_evaluate(a.env, a.seed, a.steps, a.episodes))),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
