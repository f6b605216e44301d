"""Distil, then fine-tune: PPO goes on from a distilled student (model.init_from, the normalizer
with it), with a reduced std (finetune.log_std) and a critic warm-up that keeps the actor's
weights fixed for finetune.critic_warmup_updates updates, then trains them."""

from __future__ import annotations

import io
import json

import pytest
import torch
from distill_support import make_teacher, student_config, train

from embodied_ppo.config.schema import with_values
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.finetune import critic_only
from embodied_ppo.runner.trainer import Trainer


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A distilled student run."""
    tmp = tmp_path_factory.mktemp("distil")
    teacher = make_teacher(tmp / "teacher")
    train(student_config([teacher]), tmp / "student")
    return tmp / "student"


def finetune_config(student, **finetune):
    """PPO from the student's weights: its model block, no teachers, 4 iterations."""
    return student_config(
        [],
        model={"init_from": str(student)},
        finetune=finetune,
        trainer={"total_steps": 128, "checkpoint_interval": 1},
    )


def history(cfg, run_dir, resume=None):
    """The policy's state dict before training and after each iteration, and the trainer."""
    trainer = Trainer(cfg, run_dir, resume=resume, progress_stream=io.StringIO())
    states = [{k: v.clone() for k, v in trainer.policy.state_dict().items()}]
    trainer.train(
        on_iteration=lambda _: states.append(
            {k: v.clone() for k, v in trainer.policy.state_dict().items()}
        )
    )
    return states, trainer


def moved(a, b, critic):
    """The parameters (of the critic, or of the actor) that differ between two state dicts."""
    return {
        k
        for k in a
        if critic_only(k) == critic and "normalizer" not in k and not torch.equal(a[k], b[k])
    }


def test_the_critic_warms_up_with_the_actor_frozen_then_both_train(tmp_path, student):
    saved = load_checkpoint(student / "checkpoints" / "latest.pt")["model"]
    cfg = finetune_config(student, log_std=-2.0, critic_warmup_updates=2)
    states, _ = history(cfg, tmp_path / "warm")
    start = states[0]
    # init_from carries the distilled weights and the observation normalizer; log_std is set.
    for k, v in saved.items():
        if k != "log_std":
            assert torch.equal(start[k], v), k
    assert any("normalizer" in k and v.abs().sum() > 0 for k, v in start.items())
    assert torch.equal(start["log_std"], torch.full_like(saved["log_std"], -2.0))
    for i in (1, 2):  # the warm-up: the critic learns, the actor stays the student's
        assert not moved(start, states[i], critic=False), i
        assert moved(states[i - 1], states[i], critic=True), i
    assert {"action_head.weight", "log_std"} <= moved(states[2], states[3], critic=False)
    # Without the warm-up the actor moves in the first update.
    plain, _ = history(finetune_config(student, log_std=-2.0), tmp_path / "plain")
    assert "action_head.weight" in moved(plain[0], plain[1], critic=False)


def test_a_fine_tune_resumes_bitwise_across_the_end_of_its_warm_up(tmp_path, student):
    cfg = with_values(finetune_config(student, critic_warmup_updates=2), optim__schedule="adaptive")
    straight, trainer = history(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_32.pt")
    resumed, _ = history(cfg, tmp_path / "resumed", resume=state)
    assert all(torch.equal(straight[-1][k], resumed[-1][k]) for k in straight[-1])
    # The adaptive rate waits for the actor: the frozen actor's KL of 0 would raise it at
    # every step of the warm-up (to optim.lr_max), and the main update starts from optim.lr.
    lines = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    rates = [json.loads(line)["charts/learning_rate"] for line in lines]
    assert rates[:3] == pytest.approx([cfg.optim.lr] * 3, rel=1e-6)
    assert trainer.updater is trainer.updates.main
