"""scripts/bench/profile_collection.py: the split of a vector step, and bad input in one line."""

from __future__ import annotations

from bench_support import run_module
from support import ROOT


def test_a_vector_step_of_env_processes_is_split_into_its_parts():
    config = ROOT / "configs" / "cartpole.yaml"
    out = run_module("scripts.bench.profile_collection", str(config), "env.processes=2",
                     "algorithm.rollout_steps=64", "--rollouts", "2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    ms = {}
    for line in out.stdout.splitlines()[1:]:
        name, value = line.rsplit(None, 2)[0].strip(), float(line.split()[-2])
        ms.setdefault(name, value)  # the first "(the rest)" is the vector env's
    assert "2 processes" in out.stdout.splitlines()[0]
    assert 0 < ms["local group"] < ms["vector env"] < ms["envs.step"]
    assert ms["waiting"] > 0 and ms["sending"] > 0 and ms["inference"] > 0


def test_bad_input_is_refused_in_one_line():
    out = run_module("scripts.bench.profile_collection", "missing.yaml")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "missing.yaml" in out.stderr
    assert out.stderr.startswith("scripts.bench.profile_collection: error: ")
