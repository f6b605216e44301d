"""Evaluation episodes stepped together through a task's vector env are the one-by-one
evaluation's episodes, bit for bit; tasks without such a vector env, and policies with a
state, are evaluated one by one."""

from __future__ import annotations

import torch
from conftest import tiny_config

from embodied_ppo.model.inference import inference_net
from embodied_ppo.runner.batched_eval import batched_episodes
from embodied_ppo.runner.episodes import EpisodeRunner, deterministic_action, eval_seeds
from embodied_ppo.runner.trainer import Trainer

TASK = {
    "randomization": {"friction": [0.4, 1.25], "motor_strength": [0.9, 1.1],
                      "push_interval_s": 0.2, "push_velocity": 0.5},
    "noise": {"joint_vel": 1.5},
    "action_delay": 1,
}  # fmt: skip


def test_the_episodes_stepped_together_are_the_one_by_one_episodes(tmp_path):
    cfg = tiny_config(
        "EmbodiedPPO/QuadrupedFlat-v0",
        env={"num_envs": 2, "max_episode_steps": 40, "kwargs": TASK},
        algorithm={"rollout_steps": 8, "minibatch_size": 16},
        model={"log_std_init": 0.5},
    )
    policy = Trainer(cfg, tmp_path / "run").policy
    with torch.no_grad():  # a policy that moves: its actions large, falls within 40 steps
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    act = deterministic_action(inference_net(policy).to("cpu"))
    seeds = eval_seeds(7, 6)
    together = batched_episodes(cfg.env, act, seeds)
    runner = EpisodeRunner(cfg.env)
    one_by_one = runner.run(act, seeds)
    runner.close()
    assert together is not None
    assert together.returns == one_by_one.returns  # bit for bit
    assert together.lengths == one_by_one.lengths and together.seeds == one_by_one.seeds
    assert together.logs == one_by_one.logs
    assert min(together.lengths) < 40 == max(together.lengths)  # falls and time limits both


def test_tasks_without_a_vector_env_and_stateful_policies_go_one_by_one(tmp_path):
    cfg = tiny_config("CartPole-v1")
    policy = Trainer(cfg, tmp_path / "run").policy
    act = deterministic_action(inference_net(policy).to("cpu"))
    assert batched_episodes(cfg.env, act, [1, 2]) is None

    class Stateful:
        def reset(self) -> None: ...

        def __call__(self, obs: object) -> object: ...

    quadruped = tiny_config("EmbodiedPPO/QuadrupedFlat-v0")
    assert batched_episodes(quadruped.env, Stateful(), [1, 2]) is None
