"""Distillation beside PPO (distill.objective ppo, kickstarting): the loss and its gradient
against PPO's loss plus torch's own mse/huber, feed-forward and recurrent; with a weight of 0 it
is PPO bit for bit; the weight's schedule; the term pulling the student to its teacher; a
bitwise resume; beside the mirror loss."""

from __future__ import annotations

import copy
import io
import json
import shutil
from dataclasses import replace
from functools import partial

import pytest
import torch
from algo.test_symmetry import ALGO, SHAPES, SIDES, sides_batch, sides_policy
from distill_support import chunked_means, make_teacher, prepared, student_config, train
from torch.nn import functional as F

from embodied_ppo.algo.distill_loss import DistillTerm
from embodied_ppo.algo.minibatch_loss import MinibatchLoss
from embodied_ppo.algo.mirror import Mirror
from embodied_ppo.algo.symmetry import behaviour_fields
from embodied_ppo.config.auxiliary import SymmetryConfig
from embodied_ppo.config.schema import with_values
from embodied_ppo.core.obs import map_obs
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return make_teacher(tmp_path_factory.mktemp("teacher") / "run")


def kick_config(teacher, coef: float = 0.7, **blocks: dict):
    """A blind student of `teacher` learning with PPO and the distillation loss (weight
    `coef`)."""
    distill = {"objective": "ppo", "coef": coef, **blocks.pop("distill", {})}
    return student_config([teacher], distill=distill, **blocks)


def first_batch(cfg, run_dir):
    """A run's trainer after its first rollout, and the update's minibatch of that whole
    rollout (its fields in the update's order)."""
    trainer = Trainer(cfg, run_dir, progress_stream=io.StringIO())
    trainer.distiller.begin(0)
    trainer._collect()
    batch, _ = trainer.distiller.batch(trainer.buffer, prepared(trainer))
    return trainer, batch


def step_gradient(trainer, mb):
    """The update step's loss, distillation loss and gradient (by parameter name) of rows `mb`,
    every row weighted alike."""
    step = trainer.updater.step
    step.pull()
    rows = mb[1].shape[0]
    grad, metrics = step.grads(mb, torch.full((rows,), 1.0 / rows))
    names = step.metric_names
    parts = dict(zip(step.names, grad.split(step.sizes), strict=True))
    grads = {n: parts[n].view(s) for n, s in zip(step.names, step.shapes, strict=True)}
    return metrics[names.index("loss")], metrics[names.index("distill_loss")], grads


def reference(policy, algo, mb, means, labels, coef, kind="mse", delta=1.0):
    """PPO's minibatch loss alone (`MinibatchLoss` without the term) plus `coef` times torch's
    mse_loss (or huber_loss) of the student's means (`means(copy)`) and the labels, with its
    autograd gradient by parameter name; and the distillation loss alone."""
    student = copy.deepcopy(policy)
    params = dict(student.named_parameters())
    rows = labels.shape[0]
    ppo, _ = MinibatchLoss(student, algo)(
        params, dict(student.named_buffers()), mb[: len(mb) - 2], torch.full((rows,), 1 / rows)
    )
    mean = means(student)
    if kind == "huber":
        distill = F.huber_loss(mean, labels, delta=delta)
    else:
        distill = F.mse_loss(mean, labels)
    total = ppo + coef * distill
    grads = torch.autograd.grad(total, list(params.values()))
    return total.detach(), distill.detach(), dict(zip(params, grads, strict=True))


@pytest.mark.parametrize("kind", ["mse", "huber"])
def test_the_loss_is_ppos_plus_the_weighted_distillation_loss(tmp_path, teacher, kind):
    delta = 0.05  # huber: about half of the first rollout's errors past it
    cfg = kick_config(teacher, distill={"loss": kind, "huber_delta": delta})
    trainer, batch = first_batch(cfg, tmp_path / "run")
    assert torch.equal(batch["distill_coef"], torch.full((32,), 0.7))
    mb = tuple(batch[f] for f in trainer.updater.fields)
    loss, distill, grads = step_gradient(trainer, mb)
    obs, labels = batch["obs"], batch["teacher_actions"]
    ref_loss, ref_distill, ref = reference(
        trainer.policy, cfg.algorithm, mb, lambda p: p(obs)[0].mean, labels, 0.7, kind, delta
    )
    assert float(distill) == pytest.approx(float(ref_distill), rel=1e-5)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5)
    # PPO's loss and the term both matter here: neither alone is the total.
    assert abs(float(ref_loss) - 0.7 * float(ref_distill)) > 1e-3 * abs(float(ref_loss))
    assert float(ref_distill) > 1e-3
    assert set(grads) == set(ref)  # the whole policy trains: actor, std and critic
    assert {"log_std", "value_head.weight", "action_head.weight"} <= set(grads)
    for name, grad in grads.items():
        assert torch.allclose(grad, ref[name], atol=1e-6), name


def test_a_recurrent_students_term_runs_over_chunks_from_their_stored_states(tmp_path, teacher):
    L = 4
    cfg = kick_config(
        teacher,
        env={"kwargs": {"length": 5}},  # episodes end inside chunks
        model={"recurrent": "gru", "recurrent_size": 8},
        algorithm={"sequence_length": L},
    )
    trainer, batch = first_batch(cfg, tmp_path / "run")
    buf = trainer.buffer
    T, N = buf.starts.shape
    assert buf.starts[1:L].any()
    order = torch.tensor([t * N + n for n in range(N) for t in range(T)])
    mb = tuple(map_obs(lambda x: x[order], batch[f]) for f in trainer.updater.fields)
    loss, distill, grads = step_gradient(trainer, mb)
    labels = batch["teacher_actions"][order]
    means = partial(chunked_means, buf=buf, length=L)
    ref_loss, ref_distill, ref = reference(trainer.policy, cfg.algorithm, mb, means, labels, 0.7)
    assert float(distill) == pytest.approx(float(ref_distill), rel=1e-5)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5)
    for name, grad in grads.items():
        assert torch.allclose(grad, ref[name], atol=1e-6), name
    assert grads["actor_rnn.cells.0.weight_hh"].abs().sum() > 0


def test_with_a_weight_of_zero_it_is_ppo_bit_for_bit(tmp_path, teacher):
    kicked = train(kick_config(teacher, coef=0.0), tmp_path / "kick")
    cfg = kick_config(teacher, coef=0.0)
    ppo = with_values(cfg, distill__teachers=[], distill__objective="bc", distill__coef=1.0)
    plain = train(ppo, tmp_path / "ppo")
    a, b = kicked.policy.state_dict(), plain.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    start = Trainer(cfg, tmp_path / "fresh", progress_stream=io.StringIO()).policy.state_dict()
    assert not torch.equal(start["value_head.weight"], a["value_head.weight"])


def read_metrics(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_weight_falls_linearly_over_its_decay_steps(tmp_path, teacher):
    cfg = kick_config(
        teacher, coef=2.0, distill={"coef_decay_steps": 64}, trainer={"total_steps": 96}
    )
    train(cfg, tmp_path / "run")
    rows = [r for r in read_metrics(tmp_path / "run") if "charts/distill_coef" in r]
    assert [r["charts/distill_coef"] for r in rows] == [2.0, 1.0, 0.0]
    assert all(r["losses/distill_loss"] > 0 and "losses/approx_kl" in r for r in rows)


def distance_to_teacher(trainer, batch):
    with torch.no_grad():
        mean = trainer.policy(batch["obs"])[0].mean
    return float(F.mse_loss(mean, batch["teacher_actions"]))


def test_the_term_pulls_the_student_to_its_teacher(tmp_path, teacher):
    """PPO alone drifts from the teacher's actions as it learns its own (the blind student
    cannot follow the goal the teacher reads); with the term it stays near them."""
    distances = {}
    for coef in (0.0, 5.0):
        cfg = kick_config(teacher, coef, trainer={"total_steps": 640})
        trainer = train(cfg, tmp_path / f"{coef}")
        trainer.distiller.begin(trainer.global_step)
        trainer._collect()
        batch, _ = trainer.distiller.batch(trainer.buffer, prepared(trainer))
        distances[coef] = distance_to_teacher(trainer, batch)
    assert distances[5.0] < 0.5 * distances[0.0]


def test_it_resumes_bitwise_with_its_teacher_and_its_weight(tmp_path):
    teacher = make_teacher(tmp_path / "teacher")
    cfg = kick_config(
        teacher,
        distill={"coef_decay_steps": 96},
        model={"recurrent": "history", "history_length": 3},
        algorithm={"sequence_length": 4},
        trainer={"total_steps": 128, "checkpoint_interval": 1},
    )
    straight = train(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_32.pt")
    shutil.rmtree(teacher)  # the resume reads its teacher from the checkpoint alone
    resumed = Trainer(cfg, tmp_path / "resumed", resume=state, progress_stream=io.StringIO())
    assert resumed.resume_note is None
    resumed.train()
    a, b = straight.policy.state_dict(), resumed.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    weights = [r.get("charts/distill_coef") for r in read_metrics(tmp_path / "resumed")]
    assert [w for w in weights if w is not None] == pytest.approx(
        [0.7 * (1 - 32 / 96), 0.7 * (1 - 64 / 96), 0.0]
    )


def test_beside_the_mirror_loss_the_term_is_added_and_augmentation_is_refused():
    """With algorithm.symmetry's mirror loss alone, the loss is that of PPO and the mirror loss
    (MinibatchLoss without the term) plus the weighted distillation loss, gradient included;
    augmentation, whose mirrored rows the teachers never labelled, is refused."""
    policy = sides_policy(seed=3)
    mirror = Mirror.from_declaration(SIDES, SHAPES, 4)
    n = 6
    batch = sides_batch(policy, n, seed=4)
    fields = behaviour_fields(policy, mirror, batch, n)
    names = ("obs", "actions", "logprobs", "values", "advantages", "returns")
    mb = (*(batch[f] for f in names), fields["mirror_values"])
    targets = torch.randn(n, 4, generator=torch.Generator().manual_seed(5)).clamp(-1, 1)
    coef = torch.full((n,), 0.3)
    weights = torch.ones(n) / n
    algo = replace(ALGO, symmetry=SymmetryConfig(mirror_loss_coef=0.5))
    params = dict(policy.named_parameters())
    buffers = dict(policy.named_buffers())
    ours, metrics = MinibatchLoss(policy, algo, mirror=mirror, distill=DistillTerm("mse", 1.0))(
        params, buffers, (*mb, targets, coef), weights
    )
    plain, _ = MinibatchLoss(policy, algo, mirror=mirror)(params, buffers, mb, weights)
    distill = F.mse_loss(policy(batch["obs"])[0].mean, targets)
    expected = plain + 0.3 * distill
    torch.testing.assert_close(ours, expected)
    assert float(distill.detach()) > 1e-2
    grads = torch.autograd.grad(ours, list(params.values()))
    expected_grads = torch.autograd.grad(expected, list(params.values()))
    for name, a, b in zip(params, grads, expected_grads, strict=True):
        torch.testing.assert_close(a, b, msg=name)
    augment = replace(ALGO, symmetry=SymmetryConfig(augment=True))
    with pytest.raises(ValueError, match="not their mirrors"):
        MinibatchLoss(policy, augment, mirror=mirror, distill=DistillTerm("mse", 1.0))


def test_a_critic_warmup_leaves_the_actor_then_the_term_trains_it(tmp_path, teacher):
    cfg = kick_config(teacher, finetune={"critic_warmup_updates": 1}, trainer={"total_steps": 32})
    first = train(cfg, tmp_path / "warmup").policy.state_dict()
    start = Trainer(cfg, tmp_path / "fresh", progress_stream=io.StringIO()).policy.state_dict()
    assert torch.equal(first["action_head.weight"], start["action_head.weight"])
    assert not torch.equal(first["value_head.weight"], start["value_head.weight"])
    cfg = with_values(cfg, trainer__total_steps=64)
    second = train(cfg, tmp_path / "both").policy.state_dict()
    assert not torch.equal(second["action_head.weight"], start["action_head.weight"])
