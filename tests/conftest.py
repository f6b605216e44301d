"""Shared fixtures: small configs and a tiny trained run."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from support import ROOT

from embodied_ppo.config.building import from_dict
from embodied_ppo.config.schema import Config

# The benchmarks are the package `scripts.bench` of the repository's root, run from there; their
# tests (tests/scripts/bench/) import it the same way, whatever folder pytest starts in. One
# conftest for the whole tree: a second one would take the module name `conftest` from this one.
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

torch.set_num_threads(1)


def _own_cores() -> None:
    """Each pytest-xdist worker keeps to its own share of the cores (worker i of n: every n-th
    core from the i-th, so no core is left out), and so do the processes its tests start. Unpinned, every training sized its
    threads and env workers for the whole machine while another worker's did the same: on 2
    cores, 2 workers spent about a fifth more CPU time on the same suite (spinning, switching).
    The package reads the pinned share as any process on a shared machine reads its affinity
    (embodied_ppo/core/system.py). Nothing changes without xdist or with more workers than
    cores."""
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER", ""),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT", ""),
    )
    if not (worker[2:].isdigit() and count.isdigit() and hasattr(os, "sched_setaffinity")):
        return
    cores, n = sorted(os.sched_getaffinity(0)), int(count)
    if 2 <= n <= len(cores):
        os.sched_setaffinity(0, set(cores[int(worker[2:]) % n :: n]))


_own_cores()


# Command-line overrides that make any config a run of a few seconds (64 steps).
TINY = [
    "env.num_envs=2",
    "model.hidden_sizes=[16]",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16",
    "algorithm.update_epochs=1",
    "trainer.total_steps=64",
    "trainer.device=cpu",
    # Compiling costs seconds per new shape: the tests of the compiled step turn it on.
    "trainer.compile=false",
]


def tiny_config(env_id: str = "CartPole-v1", **blocks: dict) -> Config:
    """A fast config: 2 envs x 16 steps, small MLP, a few hundred steps."""
    data: dict = {
        "env": {"id": env_id, "num_envs": 2},
        "model": {"hidden_sizes": [16, 16]},
        "algorithm": {"rollout_steps": 16, "update_epochs": 2, "minibatch_size": 8},
        "trainer": {"total_steps": 128, "seed": 0, "device": "cpu", "compile": False},
    }
    for block, values in blocks.items():
        data.setdefault(block, {}).update(values)
    return from_dict(data)


@pytest.fixture
def make_config():
    return tiny_config


# Which skips a CI run allows (EMBODIED_PPO_STRICT_SKIPS=1): tests/skip_policy.py.
from skip_policy import pytest_runtest_logreport, pytest_sessionfinish  # noqa: E402, F401
