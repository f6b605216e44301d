"""Training on a CUDA device: the compiled step under CUDA graphs, recurrent policies, resume and
deployment of a run trained on the GPU. Every test skips where torch sees no CUDA device."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pytest
import torch
from conftest import tiny_config
from torch._dynamo.utils import counters

from embodied_ppo.app.deploy import load_policy
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _train(cfg, run_dir, resume=None) -> Trainer:
    trainer = Trainer(cfg, run_dir, resume=resume, progress_stream=io.StringIO())
    trainer.train()
    return trainer


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in trainer.policy.state_dict().items()}


def _metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _close(a: dict, b: dict, atol: float) -> None:
    for k, v in a.items():
        assert torch.allclose(v, b[k], atol=atol), (k, (v - b[k]).abs().max().item())


@pytest.mark.parametrize(
    "algorithm, optim",
    [
        # linear decay, gradient clipping: the plain step
        ({"update_epochs": 3}, {"schedule": "linear", "max_grad_norm": 0.5}),
        # the KL-adaptive rate, a tensor the graph updates in place, and early stopping's skipped
        # steps (a threshold every step after an update's first passes by orders of magnitude,
        # so rounding never flips the decision; an update's first step estimates ~1e-14 from
        # old log-probabilities one rounding step from the GPU's, where the host's inference
        # computed them): the paths that write state conditionally
        ({"update_epochs": 3, "early_stop_kl": 1e-8}, {"schedule": "adaptive"}),
        # micro-batches: the gradient and the Adam step as two graphs, outputs kept across replays
        ({"update_epochs": 2, "micro_batch_size": 4}, {}),
    ],
)
def test_cuda_graph_update_matches_the_eager_update(tmp_path, caplog, algorithm, optim):
    def run(compile: bool, name: str) -> Trainer:
        cfg = tiny_config(
            "Pendulum-v1",
            algorithm=algorithm,
            optim=optim,
            trainer={"device": "cuda", "compile": compile, "total_steps": 160},
        )
        return _train(cfg, tmp_path / name)

    skips = counters["inductor"]["cudagraph_skips"]
    with caplog.at_level(logging.WARNING):
        graphs = run(True, "graphs")
    # Compiled is not enough: Inductor runs a graph it will not capture (an input it writes that
    # is not marked static, say) without CUDA graphs, and says so only in a warning.
    assert counters["inductor"]["cudagraph_skips"] == skips
    assert not [r for r in caplog.records if "skipping cudagraphs" in r.getMessage()]
    eager = run(False, "eager")
    assert graphs.updater.step.cudagraphs and graphs.updater.step.compiled
    assert not eager.updater.step.compiled
    _close(_params(graphs), _params(eager), atol=1e-4)
    # the optimizer's state lives on the device and agrees too
    for a, b in zip(
        graphs.updater.optimizer_state()["state"].values(),
        eager.updater.optimizer_state()["state"].values(),
        strict=True,
    ):
        assert a["exp_avg"].device.type == "cuda"
        assert torch.allclose(a["exp_avg"].cpu(), b["exp_avg"].cpu(), atol=1e-5)
        assert torch.equal(a["step"].cpu(), b["step"].cpu())
    assert graphs.updater.lr == pytest.approx(eager.updater.lr, rel=1e-4)
    # A replay overwrites the graph's output memory: every metric logged for an update must be
    # that update's own, as the eager run computed it, not the next minibatch's.
    logged = [_metrics(tmp_path / n) for n in ("graphs", "eager")]
    assert len(logged[0]) == len(logged[1]) == 5
    for a, b in zip(*logged, strict=True):
        for key in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-6), key


def test_recurrent_training_on_cuda_matches_cpu(tmp_path):
    def run(device: str) -> Trainer:
        cfg = tiny_config(
            "CartPole-v1",
            model={"recurrent": "lstm", "recurrent_size": 16},
            algorithm={"update_epochs": 2, "minibatch_size": 16},
            trainer={"device": device},
        )
        return _train(cfg, tmp_path / device)

    cpu, gpu = run("cpu"), run("cuda")
    assert gpu.buffer.obs.device.type == "cuda"
    _close(_params(cpu), _params(gpu), atol=1e-4)


def test_a_cuda_run_resumes_exactly_and_deploys_on_the_cpu(tmp_path):
    cfg = tiny_config(
        "Pendulum-v1",
        trainer={"device": "cuda", "compile": True, "total_steps": 128, "checkpoint_interval": 1},
    )
    straight = _train(cfg, tmp_path / "straight")
    state = load_checkpoint(tmp_path / "straight" / "checkpoints" / "ckpt_64.pt")
    resumed = _train(cfg, tmp_path / "resumed", resume=state)
    assert resumed.global_step == straight.global_step == 128
    # the same device, the same graphs (CPU runs resume bit for bit; a GPU's kernels may
    # reduce in another order from one launch to the next)
    _close(_params(straight), _params(resumed), atol=1e-6)
    # the checkpoint holds CPU-loadable tensors; the policy acts the same on either device
    on_cpu = load_policy(tmp_path / "straight", device="cpu")
    on_gpu = load_policy(tmp_path / "straight", device="cuda")
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    assert np.allclose(on_cpu(obs), on_gpu(obs), atol=1e-5)
