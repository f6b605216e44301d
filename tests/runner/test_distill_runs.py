"""A distillation run as a run: it resumes bit for bit on the CPU with the teachers its
checkpoint holds, and 2 processes x 2 envs distil as 1 process x 4 envs."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import pytest
import torch
from distill_support import GOAL, STUDENT_KEYS, TEACHER_KEYS, make_teacher, student_config, train
from runner.test_distributed import WORKER, assert_close, free_port
from support import ROOT

from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer


def test_a_distillation_resumes_bitwise_with_the_teachers_it_began_with(tmp_path):
    teacher = make_teacher(tmp_path / "teacher")
    cfg = student_config(
        [teacher],
        model={"recurrent": "history", "history_length": 3},
        algorithm={"sequence_length": 4},
        distill={"teacher_acts_steps": 64},  # the teacher acts for the first two iterations
        trainer={"total_steps": 128, "checkpoint_interval": 1},
    )
    straight = train(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_32.pt")
    shutil.rmtree(teacher)  # the resume reads its teacher from the checkpoint alone
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    assert resumed.resume_note is None
    assert torch.count_nonzero(resumed.collector.rnn_state) > 0  # the histories came back
    resumed.train()
    a, b = straight.policy.state_dict(), resumed.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(straight.collector.rnn_state, resumed.collector.rnn_state)
    start = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_32.pt")["model"]
    assert not torch.equal(start["action_head.weight"], a["action_head.weight"])


@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torch.distributed with the Gloo backend",
)
@pytest.mark.parametrize(
    "objective",
    [
        ["distill.teacher_acts_steps=32"],  # behaviour cloning, the teacher acting first
        ["distill.objective=ppo", "distill.coef=0.5", "distill.coef_decay_steps=64"],
    ],
    ids=["bc", "ppo"],
)
def test_two_processes_distil_like_one_process_with_all_envs(tmp_path, objective):
    teacher = make_teacher(tmp_path / "teacher")
    common = [
        f"env.id={GOAL}", "env.entry_point=toy_envs:GoalEnv", "model.hidden_sizes=[16]",
        f"model.actor_obs_keys=[{','.join(STUDENT_KEYS)}]",
        f"model.critic_obs_keys=[{','.join(TEACHER_KEYS)}]", "model.share_backbone=false",
        "model.recurrent=gru", "model.recurrent_size=8", "algorithm.sequence_length=4",
        "algorithm.rollout_steps=8", "algorithm.update_epochs=2", "algorithm.minibatch_size=8",
        f"distill.teachers=[{teacher}]", *objective, "trainer.total_steps=96", "trainer.device=cpu", "trainer.compile=false",
        "trainer.checkpoint_interval=1",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "tests"),  # toy_envs, in every process
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
    }
    weights = {}
    for nproc, envs in ((1, 4), (2, 2)):
        out = tmp_path / f"{nproc}x{envs}"
        out.mkdir()
        args = [str(WORKER), str(ROOT / "configs" / "pendulum.yaml"), str(out), *common]
        args += [f"env.num_envs={envs}", f"trainer.run_dir={out / 'run'}"]
        launch = [sys.executable]
        if nproc > 1:
            launch += ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
            launch += [f"--master_port={free_port()}"]
        proc = subprocess.run(
            [*launch, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        weights[nproc] = [torch.load(out / f"rank{r}.pt") for r in range(nproc)]
    one, (first, second) = weights[1][0], weights[2]
    assert_close(first, second, 0.0, "the two processes hold one student")
    assert_close(one, first, 1e-5, "2 x 2 envs distil as 1 x 4")
    start = load_checkpoint(tmp_path / "1x4" / "run" / "checkpoints" / "ckpt_32.pt")["model"]
    assert not torch.allclose(start["action_head.weight"], one["action_head.weight"])
