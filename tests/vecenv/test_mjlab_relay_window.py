"""The GPU window's script (scripts/bench/mjlab_relay.sh), shrunk to two windows of seconds on
the CPU with a few envs: each side trains, the second window continues each where the first
stopped, both are probed and compared, and what comes back fits what a lent machine returns
(at most 8 files of at most 16 MiB). Needs the mjlab extra (and rsl_rl, which it brings).

CI runs this file's tests on one pytest worker (the xdist group "relay") beside the other mjlab
tests on the other core. The windows are wall-time budgets inside which rsl_rl must start and
write its first checkpoint (~9 s alone here): the Go1 env is built first, so Warp's kernels are
compiled (about 30 s on a cold cache) before the first window starts, not inside it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support import ROOT

pytestmark = pytest.mark.xdist_group("relay")
COMMAND = (0.7, 0.1, -0.3)


@pytest.fixture(scope="module")
def go1():
    """The probe's Go1 env (two robots held to COMMAND), built once: this compiles the task's
    Warp kernels, which the windows' trainings then load from the cache."""
    pytest.importorskip("mjlab")
    import torch

    from scripts.bench.mjlab_probe import fixed_command_env

    env = fixed_command_env("Mjlab-Velocity-Flat-Unitree-Go1", 2, COMMAND, torch.device("cpu"))
    yield env
    env.close()


def window(out, state=None):
    env = dict(
        os.environ, PYTHON=sys.executable, ENVS="4", WINDOW="18s", PROBE_DEVICE="cpu",
        PROBE_ENVS="2", PROBE_SECONDS="0.2",
        OURS_ARGS="trainer.device=cpu trainer.compile=false model.hidden_sizes=[32]",
        RSL_RL_ARGS="--gpu-ids None",
    )  # fmt: skip
    args = ["bash", str(ROOT / "scripts" / "bench" / "mjlab_relay.sh"), str(out)]
    done = subprocess.run([*args, *([str(state)] if state else [])], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return (out / "window.log").read_text()


def test_two_windows_relay_both_sides_and_bring_back_little(go1, tmp_path):
    first, second = tmp_path / "w1", tmp_path / "w2"
    log = window(first)
    assert "stopped at the wall-time budget (18s)" in log
    log = window(second, first)
    assert "resuming" in log and "Loading model checkpoint" in log  # both sides continued
    for out in (first, second):
        files = [p for p in out.iterdir() if p.is_file()]
        assert len(files) <= 8 and all(p.stat().st_size < 16 * 2**20 for p in files)
        assert {"report.md", "window.log", "rsl_rl.tar.gz", "ours.tar.gz.part00"} <= {
            p.name for p in files
        }
    report = (second / "report.md").read_text()
    assert "| embodied-ppo |" in report and "| rsl_rl |" in report
    assert "commanded against achieved velocity" in report
    # Both policies held to the commands (rsl_rl's ONNX file takes one robot a call).
    probes = report.split("commanded against achieved velocity")[1]
    assert "ours: achieved" in probes and "rsl_rl: achieved" in probes
    rows = [r for r in probes.splitlines() if r.startswith("| +")]
    assert len(rows) == 3 and all(len(re.findall(r"\(\d+\) \|", r)) == 2 for r in rows), rows


def test_the_probe_holds_every_robot_to_its_command(go1):
    import torch

    for _ in range(4):
        obs = go1.step(torch.zeros(2, 12))[0]
        held = go1.command_manager.get_command("twist")
        assert torch.allclose(held, torch.tensor([COMMAND] * 2))
        assert torch.allclose(obs["actor"][:, -3:], held)  # what the policy reads
    assert not go1.cfg.observations["actor"].enable_corruption  # the play configuration
