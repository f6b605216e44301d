"""Teacher-student distillation: the labels, the loss and its gradient against references
written here, what the student reads, the teachers left as they were, several teachers, the
teacher acting first, and the inputs refused before a run starts."""

from __future__ import annotations

import copy
import hashlib
import io
import os
import subprocess
import sys
from functools import partial

import numpy as np
import pytest
import torch
from distill_support import (
    GOAL,
    GOAL_KEYS,
    STUDENT_KEYS,
    RecordActions,
    chunked_means,
    make_teacher,
    prepared,
    student_config,
    train,
)
from support import ROOT
from torch.nn import functional as F

from embodied_ppo.core.errors import TrainingError
from embodied_ppo.core.obs import map_obs
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.runner.trainer import Trainer


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return make_teacher(tmp_path_factory.mktemp("teacher") / "run")


@pytest.fixture(scope="module")
def second_teacher(tmp_path_factory):
    return make_teacher(tmp_path_factory.mktemp("teacher") / "run", seed=1)


def collected(cfg, run_dir):
    """A distillation run's trainer after its first rollout, and that rollout's batch."""
    trainer = Trainer(cfg, run_dir, progress_stream=io.StringIO())
    trainer.distiller.begin(0)
    trainer._collect()
    return trainer, trainer.distiller.batch(trainer.buffer, prepared(trainer))[0]


def teacher_means(path, obs):
    """The teacher's action, computed apart from the distiller: its whole saved module's
    Gaussian mean, clipped to the goal task's bounds [-1, 1]."""
    state = load_checkpoint(path)
    module = ActorCritic(state["model_spec"])
    module.load_state_dict(state["model"])
    with torch.no_grad():
        return module(obs)[0].mean.clamp(-1.0, 1.0)


def step_gradient(trainer, mb):
    """Our distillation step's loss and gradient (by parameter name) of rows `mb` (the update's
    fields), every row weighted alike (a token-mean)."""
    step = trainer.updater.step
    step.pull()
    rows = mb[1].shape[0]
    grad, metrics = step.grads(mb, torch.full((rows,), 1.0 / rows))
    loss = metrics[step.metric_names.index("distill_loss")]
    parts = grad.split(step.sizes)
    return loss, {n: g.view(s) for n, g, s in zip(step.names, parts, step.shapes, strict=True)}


def reference_gradient(policy, mean_fn, targets, kind, delta):
    """torch's mse_loss (or huber_loss) of a copy of the student's means and its autograd
    gradient, by parameter name."""
    student = copy.deepcopy(policy)
    mean = mean_fn(student)
    huber = F.huber_loss(mean, targets, delta=delta) if kind == "huber" else None
    loss = F.mse_loss(mean, targets) if huber is None else huber
    named = [(n, p) for n, p in student.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return loss.detach(), {n: g for (n, _), g in zip(named, grads, strict=True)}


def assert_same_gradient(ours, reference):
    for name, grad in ours.items():
        assert torch.allclose(grad, reference[name], atol=1e-6), name
    # What the step trains: the actor's mean action, nothing of the critic or the std.
    assert all(reference[n] is not None for n in ours)
    assert {n.split(".")[0] for n in ours} == {"actor_backbone", "action_head"}


def test_the_labels_are_the_teachers_mean_actions_and_the_loss_and_gradient_are_bc(
    tmp_path, teacher
):
    trainer, batch = collected(student_config([teacher]), tmp_path / "mse")
    obs, labels = batch["obs"], batch["actions"]
    expected = teacher_means(teacher / "checkpoints" / "latest.pt", obs)
    assert torch.allclose(labels, expected, atol=1e-6)
    assert labels.std(0).min() > 1e-3  # the teacher's actions vary with the goal it reads
    mb = tuple(batch[f] for f in trainer.updater.fields)
    loss, grads = step_gradient(trainer, mb)
    ref_loss, ref = reference_gradient(trainer.policy, lambda p: p(obs)[0].mean, labels, "mse", 0)
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    assert_same_gradient(grads, ref)
    # Huber, with a delta that puts about half of the errors past it.
    with torch.no_grad():
        error = (trainer.policy(obs)[0].mean - labels).abs()
    delta = float(error.median())
    assert (error > delta).float().mean() > 0.3
    cfg = student_config([teacher], distill={"loss": "huber", "huber_delta": delta})
    trainer, batch = collected(cfg, tmp_path / "huber")
    loss, grads = step_gradient(trainer, tuple(batch[f] for f in trainer.updater.fields))
    ref_loss, ref = reference_gradient(
        trainer.policy, lambda p: p(obs)[0].mean, labels, "huber", delta
    )
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    assert_same_gradient(grads, ref)


def test_a_recurrent_student_learns_over_chunks_from_their_stored_states(tmp_path, teacher):
    """Truncated backpropagation through time: each chunk of sequence_length steps runs from
    the state stored before its first step (cut from the steps before), written out here step
    by step with the student's one-step forward."""
    L = 4
    cfg = student_config(
        [teacher],
        env={"kwargs": {"length": 5}},  # episodes end inside chunks, not at their borders
        model={"recurrent": "gru", "recurrent_size": 8},
        algorithm={"sequence_length": L},
    )
    trainer, batch = collected(cfg, tmp_path / "run")
    buf = trainer.buffer
    T, N = buf.starts.shape
    assert buf.starts[1:L].any() and (buf.states[L].abs().sum(-1) > 0).all()  # ends inside
    # Rows as the update takes them: each env's chunks, each chunk's steps in order.
    order = torch.tensor([t * N + n for n in range(N) for t in range(T)])
    mb = tuple(map_obs(lambda x: x[order], batch[f]) for f in trainer.updater.fields)
    loss, grads = step_gradient(trainer, mb)
    labels = batch["actions"][order]
    means = partial(chunked_means, buf=buf, length=L)
    ref_loss, ref = reference_gradient(trainer.policy, means, labels, "mse", 0)
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    for name, grad in grads.items():
        assert torch.allclose(grad, ref[name], atol=1e-6), name
    assert "actor_rnn.cells.0.weight_hh" in grads and "critic_rnn.cells.0.weight_hh" not in grads


def test_distillation_leaves_the_teacher_and_the_critic_as_they_were(tmp_path, teacher):
    path = teacher / "checkpoints" / "latest.pt"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    saved = load_checkpoint(path)["model"]
    trainer = Trainer(student_config([teacher]), tmp_path / "run", progress_stream=io.StringIO())
    start = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.train()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    (module,) = trainer.distiller.teachers
    for name, value in module.state_dict().items():
        assert torch.equal(value, saved[name]), name
    assert all(not p.requires_grad for p in module.parameters())
    end = trainer.policy.state_dict()
    moved = {k for k in start if not torch.equal(start[k], end[k])}
    assert "action_head.weight" in moved and "actor_backbone.0.weight" in moved
    assert not {k for k in moved if k.startswith(("critic_", "value_head", "log_std"))}
    # The run's checkpoint carries the teacher it learned from.
    (kept,) = load_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")["teachers"]
    assert all(torch.equal(v, saved[k]) for k, v in kept["model"].items())


def test_the_student_reads_only_its_own_keys(tmp_path, teacher):
    trainer = train(student_config([teacher]), tmp_path / "run")
    trainer.distiller.begin(trainer.global_step)
    trainer._collect()
    batch = trainer.distiller.batch(trainer.buffer, prepared(trainer))[0]
    g = torch.Generator().manual_seed(3)
    # The privileged keys scrambled where the student reads them; the labels kept.
    scrambled = dict(batch["obs"])
    for key in ("goal", "teacher"):
        scrambled[key] = torch.randn(scrambled[key].shape, generator=g) * 5
    policy = trainer.policy
    with torch.no_grad():
        assert torch.equal(policy(batch["obs"])[0].mean, policy(scrambled)[0].mean)
        assert torch.equal(
            policy.deterministic_action(batch["obs"])[0], policy.deterministic_action(scrambled)[0]
        )
    fields = trainer.updater.fields
    loss, grads = step_gradient(trainer, tuple(batch[f] for f in fields))
    other = {**batch, "obs": scrambled}
    loss2, grads2 = step_gradient(trainer, tuple(other[f] for f in fields))
    assert loss == loss2 and all(torch.equal(grads[k], grads2[k]) for k in grads)
    assert trainer.policy.actor_keys == STUDENT_KEYS


def test_several_teachers_label_each_env_by_the_teacher_its_observation_names(
    tmp_path, teacher, second_teacher
):
    cfg = student_config([teacher, second_teacher], distill={"teacher_key": "teacher"})
    trainer, batch = collected(cfg, tmp_path / "run")
    obs, labels = batch["obs"], batch["actions"]
    which = obs["teacher"][:, 0]
    assert 0 < which.mean() < 1  # both teachers label some steps
    first = teacher_means(teacher / "checkpoints" / "latest.pt", obs)
    second = teacher_means(second_teacher / "checkpoints" / "latest.pt", obs)
    expected = torch.where(which.bool().unsqueeze(-1), second, first)
    assert torch.allclose(labels, expected, atol=1e-6)
    assert not torch.allclose(first, second, atol=1e-3)
    trainer.train()  # and the run trains
    # An env that names a third teacher stops the run at its first rollout, in one line.
    cfg = student_config(
        [teacher, second_teacher],
        env={"kwargs": {"teachers": 3}},
        distill={"teacher_key": "teacher"},
    )
    with pytest.raises(TrainingError) as err:
        train(cfg, tmp_path / "three")
    message = str(err.value)
    assert message.startswith("iteration 0: distill.teacher_key: an env's 'teacher' is 2")
    assert "last good checkpoint: none written yet" in message and "\n" not in message


def test_the_teacher_acts_in_the_first_phase_then_the_student(tmp_path, teacher):
    RecordActions.seen.clear()
    cfg = student_config(
        [teacher],
        env={"wrappers": [{"name": "distill_support:RecordActions"}]},
        distill={"teacher_acts_steps": 32},  # the warm-up and the first rollout of 32 steps
    )
    train(cfg, tmp_path / "run")
    assert len(RecordActions.seen) == 4
    for env in RecordActions.seen:
        obs = {k: torch.as_tensor(np.stack([o[k] for o, _ in env.records])) for k in GOAL_KEYS}
        actions = torch.as_tensor(np.stack([a for _, a in env.records]), dtype=torch.float32)
        by_teacher = teacher_means(teacher / "checkpoints" / "latest.pt", obs)
        same = (actions - by_teacher).abs().amax(-1) < 1e-5
        assert len(same) == 24 and same[:16].all() and not same[16:].any()


# ------------------------------------------------------------------------------ bad input
def cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "PYTHONWARNINGS": "ignore"}
    base = [
        f"env.id={GOAL}", "env.entry_point=toy_envs:GoalEnv", "env.num_envs=4",
        "model.hidden_sizes=[16]", f"model.actor_obs_keys={STUDENT_KEYS}".replace("'", ""),
        "algorithm.rollout_steps=8", "algorithm.minibatch_size=16", "trainer.total_steps=32",
        "trainer.compile=false",
    ]  # fmt: skip
    cmd = [sys.executable, "-m", "embodied_ppo", "train", "configs/pendulum.yaml", *base, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def pendulum_teacher(tmp_path_factory):
    from conftest import tiny_config

    run = tmp_path_factory.mktemp("pendulum") / "run"
    train(tiny_config("Pendulum-v1", trainer={"total_steps": 32}), run)
    return run


@pytest.fixture(scope="module")
def keyed_teacher(tmp_path_factory):
    """A teacher that reads the goal task's `teacher` key, which the Dict task lacks."""
    return make_teacher(tmp_path_factory.mktemp("keyed") / "run", keys=["goal", "teacher"])


@pytest.mark.parametrize(
    "case, expected",
    [
        ("not a run", "distill.teachers[0]: {folder}: no checkpoint found"),
        ("keys the env lacks", "distill.teachers[0]: {keyed} reads observation key 'teacher'"),
        ("student key", "model.actor_obs_keys[0]: got 'velocity'"),
        ("action space", "distill.teachers[0]: {pendulum} outputs 1 action dimensions"),
        ("teacher key", "distill.teacher_key: got 'colour', which"),
    ],
)
def test_bad_inputs_are_one_line_exit_2_nothing_written(
    tmp_path, case, expected, teacher, keyed_teacher, pendulum_teacher
):
    run = tmp_path / "run"
    folder = tmp_path / "folder"
    folder.mkdir()
    args = {
        "not a run": [f"distill.teachers=[{folder}]"],
        "keys the env lacks": [
            f"distill.teachers=[{keyed_teacher}]", "env.id=EmbodiedPPOTestDict-v0",
            "env.entry_point=toy_envs:DictEnv",
        ],
        "student key": [f"distill.teachers=[{teacher}]", "model.actor_obs_keys=[velocity]"],
        "action space": [f"distill.teachers=[{pendulum_teacher}]"],
        "teacher key": [f"distill.teachers=[{teacher},{teacher}]", "distill.teacher_key=colour"],
    }[case]  # fmt: skip
    out = cli(*args, f"trainer.run_dir={run}")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    message = expected.format(folder=folder, keyed=keyed_teacher, pendulum=pendulum_teacher)
    assert len(lines) == 1 and lines[0].startswith(f"embodied-ppo: error: {message}"), lines
    assert not run.exists()


@pytest.mark.parametrize(
    "blocks, fragment",
    [
        ({"distill": {"loss": "huber"}}, "distill.loss: got 'huber' without distill.teachers"),
        ({"distill": {"teachers": ["a", "b"]}}, "distill.teacher_key: required with 2 teachers"),
        ({"distill": {"teachers": ["a"], "teacher_key": "teacher"}}, "with one teacher"),
        ({"distill": {"teachers": ["a"], "huber_delta": 0.0}}, "distill.huber_delta: got 0.0"),
        ({"distill": {"teachers": ["a"]}, "optim": {"schedule": "adaptive"}}, "optim.schedule"),
        ({"distill": {"teachers": ["a"]}, "algorithm": {"use_kl_loss": True}}, "use_kl_loss"),
        ({"distill": {"teachers": ["a"]}, "algorithm": {"rnd": {"enabled": True}}}, "rnd.enabled"),
        (
            {"distill": {"teachers": ["a"]}, "algorithm": {"symmetry": {"augment": True}}},
            "algorithm.symmetry.augment: got True with distill.teachers",
        ),
        (
            {"distill": {"teachers": ["a"], "objective": "ppo", "teacher_acts_steps": 8}},
            "distill.teacher_acts_steps: got 8 with distill.objective ppo",
        ),
        (
            {
                "distill": {"teachers": ["a"], "objective": "ppo"},
                "algorithm": {"symmetry": {"augment": True}},
            },
            "algorithm.symmetry.augment: got true with distill.objective ppo",
        ),
        ({"distill": {"teachers": ["a"], "objective": "ppo", "coef": -1}}, "distill.coef: got -1"),
        (
            {"distill": {"teachers": ["a"], "objective": "ppo", "coef_decay_steps": -5}},
            "distill.coef_decay_steps: got -5",
        ),
        ({"distill": {"teachers": ["a"], "coef": 2.0}}, "distill.coef: got 2.0 with distill.obj"),
        (
            {"distill": {"objective": "ppo"}},
            "distill.objective: got 'ppo' without distill.teachers",
        ),
        ({"finetune": {"log_std": -1.0}}, "finetune.log_std: needs model.init_from"),
        ({"finetune": {"log_std": -9.0}}, "finetune.log_std: got -9.0"),
        ({"finetune": {"critic_warmup_updates": -1}}, "finetune.critic_warmup_updates: got -1"),
        (
            {
                "finetune": {"critic_warmup_updates": 2},
                "algorithm": {"loss_type": "actor", "adv_type": "grpo", "group_size": 2},
            },
            "algorithm.adv_type grpo has no critic",
        ),
        ({"finetune": {"critic_warmup_updates": 2}, "distill": {"teachers": ["a"]}}, "no critic"),
    ],
)
def test_distill_and_finetune_settings_are_checked_with_one_line(blocks, fragment):
    from conftest import tiny_config

    from embodied_ppo.core.errors import UserError

    with pytest.raises(UserError) as err:
        tiny_config(GOAL, **blocks)
    assert fragment in str(err.value) and "\n" not in str(err.value)
