"""What the benchmarks' tests share: a tiny config and running an entry point as a user does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from support import ROOT


def write_config(path: Path) -> Path:
    """A Pendulum config of a few seconds' training, with a header comment."""
    path.write_text(
        "# Tiny Pendulum: what was tuned\n# and what mattered.\n"
        + yaml.safe_dump(
            {
                "env": {"id": "Pendulum-v1", "num_envs": 2, "max_episode_steps": 50},
                "model": {"hidden_sizes": [16, 16]},
                "algorithm": {"rollout_steps": 32, "update_epochs": 1, "minibatch_size": 32},
                "trainer": {"total_steps": 1000, "compile": False, "device": "cpu"},
            }
        )
    )
    return path


def run_module(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` from the repository's root, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
