"""Relay training: a run trained in windows of wall time (`train --for`), packed small
(`pack`), unpacked elsewhere and resumed equals the uninterrupted run bit for bit on the CPU."""

from __future__ import annotations

import json
import tarfile
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY

from embodied_ppo.app import cli, relay
from embodied_ppo.app.relay import WallBudget, pack_run, parse_duration
from embodied_ppo.core.errors import UserError
from embodied_ppo.io.checkpoint import load_checkpoint

# Four iterations of 32 steps; a checkpoint only at the end, unless a stop writes one.
RUN = [*TINY, "trainer.total_steps=128", "trainer.checkpoint_interval=100"]


def clocked(key: str) -> bool:
    """Whether a metric measures the wall clock, not the run."""
    return key == "time" or key.endswith(("_time", "SPS")) or key.startswith("perf/")


def run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as info:
        cli.main([*map(str, args)])
    return int(info.value.code)


def ticking(monkeypatch, step: float = 1.0) -> None:
    """The budget's clock advances `step` seconds each time it is read: one read a poll."""
    now = iter(range(10**6))
    monkeypatch.setattr(relay, "time", SimpleNamespace(monotonic=lambda: next(now) * step))


def unclocked(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not clocked(k)} for r in rows]


@pytest.mark.parametrize(
    "text, seconds", [("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), (" 2 m", 120.0)]
)
def test_durations_are_read_with_their_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10", "10 minutes", "-5m", "0s", "m"])
def test_a_duration_without_a_unit_is_one_line(text):
    with pytest.raises(UserError, match=r"^--for: got .*(unit|positive)") as err:
        parse_duration(text)
    assert "\n" not in str(err.value)


def test_the_budget_stops_before_an_iteration_that_would_overrun_it():
    now = [0.0]
    budget = WallBudget(10.0, clock=lambda: now[0])
    polls = []
    for _ in range(6):  # iterations of 3 s
        polls.append(budget())
        now[0] += 3.0
    # Before the first iteration: go; at 3 s and 6 s the next one ends by 9 s: go; at 9 s it
    # would end at 12 s: stop, and stay stopped.
    assert polls == [False, False, False, True, True, True]


def test_a_relayed_run_equals_the_uninterrupted_one(tmp_path, monkeypatch, capsys):
    straight, relayed = tmp_path / "straight", tmp_path / "relayed"
    assert run_cli("train", "configs/cartpole.yaml", *RUN, f"trainer.run_dir={straight}") == 0
    # First window: polls at 1 s (before the first iteration) and 2 s; at 3 s a third
    # iteration would end past 3.5 s: two iterations, then a checkpoint, status 0.
    ticking(monkeypatch)
    capsys.readouterr()
    args = ("configs/cartpole.yaml", *RUN, f"trainer.run_dir={relayed}")
    assert run_cli("train", *args, "--for", "3.5s") == 0
    out = capsys.readouterr().out
    assert "stopped at the wall-time budget (3.5s) at step 64 (iteration 2)" in out
    assert f"embodied-ppo train --resume {relayed}`, with --for" in out
    assert load_checkpoint(relayed)["global_step"] == 64
    # Carried to another machine: packed, unpacked elsewhere, resumed there to the end.
    archive = tmp_path / "relayed.tar.gz"
    assert run_cli("pack", relayed, archive) == 0
    assert "tar -xzf relayed.tar.gz -C runs/" in capsys.readouterr().out
    elsewhere = tmp_path / "elsewhere"
    with tarfile.open(archive) as tar:
        tar.extractall(elsewhere, filter="tar")
    moved = elsewhere / "relayed"
    assert sorted(p.name for p in (moved / "checkpoints").iterdir()) == [
        "ckpt_64.pt",
        "latest.pt",
    ]
    assert run_cli("train", "--resume", moved, "--for", "10m") == 0
    a, b = load_checkpoint(straight), load_checkpoint(moved)
    assert a["global_step"] == b["global_step"] == 128
    for part in ("model", "optimizer", "rng"):
        assert repr(_tensors(a[part])) == repr(_tensors(b[part])), part
    assert unclocked(moved) == unclocked(straight)


def _tensors(state):
    """A checkpoint part with tensors as lists (exact values, comparable with ==)."""
    if isinstance(state, torch.Tensor):
        return state.tolist()
    if isinstance(state, dict):
        return {k: _tensors(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return [_tensors(v) for v in state]
    return state


def test_pack_carries_the_newest_intact_checkpoint_once(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*TINY, "trainer.total_steps=96", "trainer.checkpoint_interval=1"]
    assert run_cli("train", "configs/cartpole.yaml", *args, f"trainer.run_dir={run}") == 0
    (run / "checkpoints" / "latest.pt").write_bytes(b"torn")  # a write cut short
    packed = pack_run(run, tmp_path / "run.tar.gz")
    assert packed.global_step == 64  # ckpt_96.pt is latest.pt's link: the newest intact is 64
    with tarfile.open(packed.path) as tar:
        names = tar.getnames()
        latest = tar.getmember("run/checkpoints/latest.pt")
        assert latest.islnk() and latest.linkname == "run/checkpoints/ckpt_64.pt"
    assert "run/config.yaml" in names and "run/metrics.jsonl" in names
    assert not any("ckpt_32" in n or ".lock" in n for n in names)


def test_pack_refuses_what_is_not_a_run_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "config.yaml").write_text("mine: 1\n")
    for target in (tmp_path / "notes", tmp_path / "missing"):
        out = tmp_path / "out.tar.gz"
        assert run_cli("pack", target, out) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"embodied-ppo: error: pack: {target} is not a run directory")
        assert not out.exists()
    assert run_cli("pack", tmp_path / "notes", tmp_path / "out.zip") == 2
    assert "the archive is a .tar.gz" in capsys.readouterr().err
