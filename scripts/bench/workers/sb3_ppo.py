"""Stable-Baselines3 PPO on the shared settings of a side-by-side timing (lib/ppo_settings.py):
one contender of scripts.bench.throughput and scripts.bench.whole_process, in its own process.

    python -m scripts.bench.workers.sb3_ppo --mode steady --settings JSON --iterations 3
    python -m scripts.bench.workers.sb3_ppo --mode whole --settings JSON --steps 200000

`steady` trains iterations + 1 iterations and prints {"steps", "seconds"} of the last
`iterations` (the first, its warm-up, excluded); `whole` trains `steps` steps and prints
{"steps", "gradient_steps"} (the caller times the whole process from outside). `--threads N`
sets torch's threads (default: torch's own).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from scripts.bench.lib import args as cli_args


def sb3_learning_rate(s: dict[str, Any], total_steps: int) -> float | Callable[[float], float]:
    """The config's learning-rate schedule as Stable-Baselines3 takes it.

    Under early stopping the schedule decides how many gradient steps an update takes, so both
    contenders must follow the same one. Ours sets iteration k's rate before its rollout from
    the k x batch steps done; Stable-Baselines3 asks its schedule after the rollout, with
    progress_remaining = 1 - (k + 1) x batch / total: one batch is added back.
    """
    if s.get("schedule", "constant") == "constant":
        return s["lr"]
    batch = s["rollout_steps"] * s["num_envs"]
    lr, back = s["lr"], batch / total_steps
    return lambda progress_remaining: lr * min(1.0, progress_remaining + back)


def sb3_model(s: dict[str, Any], threads: int | None, total_steps: int):
    """Stable-Baselines3 PPO with the shared settings, to train for `total_steps`; (model,
    transitions per iteration)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if threads is not None:
        torch.set_num_threads(threads)
    env = VecNormalize(
        make_vec_env(s["env"], n_envs=s["num_envs"], seed=0),
        gamma=s["gamma"],
        clip_obs=10.0,
        clip_reward=10.0,
    )
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[s["activation"]]
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=s["rollout_steps"],
        batch_size=s["minibatch_size"],
        n_epochs=s["epochs"],
        learning_rate=sb3_learning_rate(s, total_steps),
        gamma=s["gamma"],
        gae_lambda=s["gae_lambda"],
        clip_range=0.2,
        clip_range_vf=s["value_clip"],
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=s["max_grad_norm"],
        # Its epochs stop once a minibatch's approx_kl passes 1.5 x target_kl; ours skip the
        # minibatch whose approx_kl passes early_stop_kl, and the rest of the update with it.
        target_kl=None if s.get("early_stop_kl") is None else s["early_stop_kl"] / 1.5,
        policy_kwargs={
            "net_arch": {"pi": s["hidden"], "vf": s["hidden"]},
            "activation_fn": act,
            "log_std_init": s["log_std_init"],
        },
        device=s.get("device", "cpu"),
        seed=0,
        verbose=0,
    )
    return model, s["rollout_steps"] * s["num_envs"]


def _timer():
    """A callback that notes the clock at the start of every rollout (`marks`)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.marks: list[float] = []

        def _on_rollout_start(self) -> None:
            self.marks.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

    return Timer()


def steady(s: dict[str, Any], iterations: int, threads: int | None) -> dict[str, float]:
    """Steps and seconds of `iterations` training iterations after one of warm-up."""
    batch = s["rollout_steps"] * s["num_envs"]
    model, _ = sb3_model(s, threads, (iterations + 1) * batch)
    timer = _timer()
    model.learn(total_timesteps=(iterations + 1) * batch, callback=timer)
    end = time.perf_counter()
    # marks[0] starts the warm-up iteration; marks[1] the first measured one.
    return {"steps": iterations * batch, "seconds": end - timer.marks[1]}


def whole(s: dict[str, Any], steps: int, threads: int | None) -> dict[str, int]:
    """Train `steps` steps; the steps and the gradient steps taken (an early-stopped update
    takes fewer)."""
    model, _ = sb3_model(s, threads, steps)
    taken = 0

    def count(*_: object) -> None:
        nonlocal taken
        taken += 1

    model.policy.optimizer.register_step_post_hook(count)
    model.learn(total_timesteps=steps)
    return {"steps": steps, "gradient_steps": taken}


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, train, print the JSON line."""
    p = cli_args.parser("scripts.bench.workers.sb3_ppo", __doc__)
    p.add_argument("--mode", choices=("steady", "whole"), required=True)
    p.add_argument("--settings", required=True, help="the shared settings, as JSON")
    p.add_argument("--iterations", type=int, default=3, help="steady: measured iterations")
    p.add_argument("--steps", type=int, default=None, help="whole: steps to train")
    p.add_argument("--threads", type=int, default=None)

    def body(a) -> None:
        s = json.loads(a.settings)
        if a.mode == "whole" and a.steps is None:
            raise cli_args.BadInput("--mode whole needs --steps")
        out = whole(s, a.steps, a.threads) if a.mode == "whole" else steady(
            s, a.iterations, a.threads
        )  # fmt: skip
        print(json.dumps(out))

    return cli_args.run_main(p, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
