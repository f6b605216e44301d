"""A task's own vector env in the sync backend (env.batched): a run through the quadruped's
vector env equals the run through its env objects, whatever the processes and threads; exact
resume through it (in both processes); which vector entry points are used; a wrong one is one
line."""

from __future__ import annotations

import io
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import tiny_config
from gymnasium.vector import AutoresetMode

from embodied_ppo.core.errors import ConfigError
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv import gym_backend
from embodied_ppo.vecenv.gym_backend import env_threads
from embodied_ppo.vecenv.serial import SerialVectorEnv
from embodied_ppo.vecenv.task_vector import TaskVectorGroup, vector_entry
from embodied_ppo.vecenv.workers import ProcessVectorEnv

TIMING = {"time", "charts/SPS", "charts/collect_time", "charts/update_time", "eval/time"}
QUADRUPED = "EmbodiedPPO/QuadrupedFlat-v0"
# Every randomization, short episodes (falls, time limits and resets within the run).
TASK = {
    "randomization": {"friction": [0.4, 1.25], "added_mass": [-1, 1], "motor_strength": [0.9, 1.1],
                      "kp_scale": [0.9, 1.1], "push_interval_s": 0.2, "push_velocity": 0.5},
    "noise": {"joint_vel": 1.5, "base_ang_vel": 0.2},
    "action_delay": 1,
}  # fmt: skip


def quadruped(**env: object) -> object:
    return tiny_config(
        QUADRUPED,
        env={"num_envs": 6, "max_episode_steps": 20, "kwargs": TASK, **env},
        algorithm={"rollout_steps": 8, "minibatch_size": 16},
        trainer={"total_steps": 4 * 48, "checkpoint_interval": 2},
    )


def metrics(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


def train(cfg, run_dir) -> Trainer:
    trainer = Trainer(cfg, run_dir, progress_stream=io.StringIO())
    trainer.train()
    return trainer


def params(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.policy.parameters()]


def test_a_run_through_the_vector_env_equals_the_run_through_env_objects(tmp_path):
    objects = train(quadruped(batched=False), tmp_path / "objects")
    assert isinstance(objects.envs.env, SerialVectorEnv)
    reference = metrics(tmp_path / "objects")
    assert any("metrics/fall_rate" in row for row in reference)  # episodes ended and logged
    for name, env in {
        "batched": {},
        "threads": {"threads": 2},
        "threads per core": {"threads": None},
        "processes": {"processes": 2},
        "both": {"processes": 2, "threads": 2},
    }.items():
        run = train(quadruped(**env), tmp_path / name)
        kind = ProcessVectorEnv if env.get("processes") else TaskVectorGroup
        assert isinstance(run.envs.env, kind), name
        if kind is ProcessVectorEnv:
            assert isinstance(run.envs.env.local, TaskVectorGroup)
        assert metrics(tmp_path / name) == reference, name
        for a, b in zip(params(objects), params(run), strict=True):
            assert torch.equal(a, b), name


@pytest.mark.parametrize("processes", [1, 2])
def test_resume_through_the_vector_env_is_bitwise_identical(tmp_path, processes):
    cfg = quadruped(processes=processes)
    straight = train(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / f"ckpt_{2 * 48}.pt")
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    assert resumed.resume_note is None  # every env captured mid-episode, in both processes
    resumed.train()
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "straight")[2:]
    for a, b in zip(params(straight), params(resumed), strict=True):
        assert torch.equal(a, b)
    assert np.array_equal(straight.collector.obs["joint_vel"], resumed.collector.obs["joint_vel"])


def test_a_checkpoint_of_env_objects_resumes_the_vector_env_on_fresh_episodes(tmp_path):
    train(quadruped(batched=False), tmp_path / "objects")
    state = load_checkpoint(tmp_path / "objects" / "checkpoints" / f"ckpt_{2 * 48}.pt")
    resumed = Trainer(
        quadruped(), tmp_path / "resumed", resume=state, progress_stream=io.StringIO()
    )
    assert "fresh episodes" in resumed.resume_note and "env objects" in resumed.resume_note


def test_only_vector_envs_that_declare_themselves_member_exact_are_used():
    # Gymnasium's CartPole registers a vector entry point that draws every env from one
    # generator: its envs are not the single env's, so env objects step CartPole.
    assert gym.spec("CartPole-v1").vector_entry_point is not None
    assert vector_entry(tiny_config("CartPole-v1").env) is None
    assert vector_entry(tiny_config(QUADRUPED).env) is not None
    assert vector_entry(quadruped(batched=False).env) is None
    wrapped = {"wrappers": [{"name": "embodied_ppo_envs.sim2real:ActionDelay"}]}
    assert vector_entry(quadruped(**wrapped).env) is None


class NextStepVector(gym.vector.VectorEnv):
    """A vector env that claims to be member-exact but resets on the next step."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "member_exact": True}

    def __init__(self, num_envs: int, **_: object) -> None:
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.single_action_space = gym.spaces.Box(-1, 1, (1,), np.float32)


def test_a_vector_env_that_resets_on_the_next_step_is_one_line():
    gym.register(
        "EmbodiedPPOTestNextStep-v0",
        entry_point="gymnasium.envs.classic_control:CartPoleEnv",
        vector_entry_point=NextStepVector,
    )
    try:
        cfg = tiny_config("EmbodiedPPOTestNextStep-v0").env
        with pytest.raises(ConfigError, match="env.batched=false") as info:
            TaskVectorGroup(cfg, range(2))
        assert "\n" not in str(info.value)
    finally:
        del gym.registry["EmbodiedPPOTestNextStep-v0"]


def test_null_threads_are_the_usable_cores_shared_among_the_processes(monkeypatch):
    monkeypatch.setattr(gym_backend, "usable_cores", lambda: 16)
    assert env_threads(quadruped(threads=None).env) == 16
    assert env_threads(quadruped(threads=None, processes=2).env) == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # four torchrun processes on this host
    assert env_threads(quadruped(threads=None, processes=2).env) == 2
    assert env_threads(quadruped(threads=3).env) == 3
    monkeypatch.setattr(gym_backend, "usable_cores", lambda: 2)
    assert env_threads(quadruped(threads=None, processes=2).env) == 1  # at least one
