"""scripts/bench/update.py and its worker: the products' FLOP count its profile rests on, and one
measurement of each contender in a fresh process."""

from __future__ import annotations

import json

import pytest
from bench_support import run_module

from scripts.bench.workers import update


@pytest.mark.parametrize("hidden", [[64, 64], [32], [256, 128, 64]])
def test_the_products_flops_are_counted_as_torch_counts_them(hidden):
    """The GFLOP/s that `--profile` reports rest on this count: torch's own FLOP counter of a
    forward and backward pass of the same MLPs (no input gradient) must agree."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    obs_dim, act_dim, rows = 17, 6, 64
    nets = [
        torch.nn.Sequential(
            *[torch.nn.Linear(i, o) for i, o in zip([obs_dim, *hidden], [*hidden, out])]
        )
        for out in (act_dim, 1)
    ]
    x = torch.randn(rows, obs_dim)
    with FlopCounterMode(display=False) as counter:
        sum(net(x).sum() for net in nets).backward()
    assert update.matmul_flops(obs_dim, act_dim, hidden, rows) == counter.get_total_flops()


def test_the_eager_step_is_timed_in_a_process_of_its_own(tmp_path):
    """One round of the eager contender on HalfCheetah's shape (no compilation: seconds), run as
    the benchmark runs it, from a folder outside the checkout: a time per gradient step and
    the threads it used, in the record with its provenance."""
    out = tmp_path / "update.json"
    ran = run_module("scripts.bench.update", "--shape", "halfcheetah", "--contenders", "eager",
                     "--rounds", "1", "--updates", "2", "--json", str(out), timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "halfcheetah round 1: eager" in ran.stdout and "ms/step" in ran.stdout
    record = json.loads(out.read_text())
    (m,) = record["halfcheetah"]["eager"]
    assert m["ms"] > 0 and m["threads"].startswith("torch: ")
    assert record["provenance"]["command"].startswith("python -m scripts.bench.update ")
