"""The mjlab task configs (configs/mjlab_*.yaml): each says what to expect, its budget and
whether it was trained on a GPU; the G1 humanoid's and the manipulation task's train a few
iterations on the CPU (the mjlab extra; their validity for their env is
tests/config/test_config.py::test_every_committed_config_is_valid_for_its_env)."""

from __future__ import annotations

import math

import pytest
from support import ROOT

CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("mjlab_*.yaml"))
# A few iterations of a few envs: what the CPU affords.
TINY = [
    "trainer.device=cpu", "trainer.compile=false", "trainer.torch_threads=1",
    "env.num_envs=4", "model.hidden_sizes=[32]", "algorithm.rollout_steps=8",
    "algorithm.minibatch_size=16", "trainer.total_steps=64", "trainer.checkpoint_interval=1",
]  # fmt: skip


def header(name: str) -> str:
    lines = (ROOT / "configs" / name).read_text().splitlines()
    return " ".join(line[1:].strip() for line in lines if line.startswith("#"))


def test_the_tasks_of_the_issue_have_configs():
    assert {
        "mjlab_go1_flat.yaml",
        "mjlab_go1_rough.yaml",
        "mjlab_g1_flat.yaml",
        "mjlab_yam_lift_cube.yaml",
    } <= set(CONFIGS)


@pytest.mark.parametrize("name", [c for c in CONFIGS if c != "mjlab_go1_flat.yaml"])
def test_each_new_config_says_what_to_expect_its_budget_and_that_no_gpu_trained_it(name):
    text = header(name)
    assert "What to expect:" in text and "Budget:" in text
    assert "Not yet trained on a GPU by this package" in text


@pytest.fixture(scope="module")
def mjlab():
    return pytest.importorskip("mjlab")


@pytest.mark.parametrize("name", ["mjlab_g1_flat.yaml", "mjlab_yam_lift_cube.yaml"])
def test_the_config_trains_a_few_iterations_on_the_cpu(mjlab, name, tmp_path):
    from embodied_ppo.app import api
    from embodied_ppo.io.checkpoint import load_checkpoint

    result = api.train(ROOT / "configs" / name, TINY, run_dir=tmp_path / "run")
    assert result.global_step == 64 and result.iteration == 2 and not result.stopped
    losses = [v for k, v in result.metrics.items() if k.startswith("losses/")]
    assert losses and all(math.isfinite(v) for v in losses)
    state = load_checkpoint(tmp_path / "run")
    assert state["global_step"] == 64 and state["envs"]["members"] is not None
