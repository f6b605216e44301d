"""Checkpoints are data only, written atomically, and refuse anything else with one line."""

from __future__ import annotations

import io
import os
import pickle

import pytest
import torch

from embodied_ppo.core.errors import CheckpointError, UserError
from embodied_ppo.io.checkpoint import FORMAT, load_checkpoint, save_checkpoint
from embodied_ppo.io.files import atomic_write_bytes


def test_round_trip_and_latest(tmp_path):
    state = {
        "model": {"w": torch.arange(4.0)},
        "global_step": 7,
        "config": {"a": [1, 2]},
        "rng": {"python": (3, tuple(range(5)), None)},
    }
    path = save_checkpoint(tmp_path, state, step=7)
    assert path.name == "ckpt_7.pt"
    loaded = load_checkpoint(tmp_path)  # a run dir resolves to checkpoints/latest.pt
    assert loaded["format"] == FORMAT and loaded["global_step"] == 7
    assert torch.equal(loaded["model"]["w"], torch.arange(4.0))
    save_checkpoint(tmp_path, {**state, "global_step": 9}, step=9)
    assert load_checkpoint(tmp_path)["global_step"] == 9
    assert load_checkpoint(tmp_path / "checkpoints" / "ckpt_7.pt")["global_step"] == 7
    # No temp files left behind.
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "ckpt_7.pt",
        "ckpt_9.pt",
        "latest.pt",
    ]


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nope.pt")


def test_truncated_and_random_bytes(tmp_path):
    path = save_checkpoint(tmp_path, {"model": {"w": torch.randn(1000)}}, step=1)
    data = path.read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as info:
        load_checkpoint(bad)
    assert "\n" not in str(info.value)
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError):
        load_checkpoint(noise)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/embodied_ppo_pwned",))


def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = "/tmp/embodied_ppo_pwned"
    if os.path.exists(marker):
        os.unlink(marker)
    path = tmp_path / "evil.pt"
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "format_version": 1, "x": _Evil()}, buf)
    path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(path)
    assert not os.path.exists(marker)
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(CheckpointError):
        load_checkpoint(raw)
    assert not os.path.exists(marker)


def test_foreign_torch_file_is_rejected(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    with pytest.raises(CheckpointError, match="not an embodied-ppo checkpoint"):
        load_checkpoint(path)


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    atomic_write_bytes(path, b"old")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_the_run_lock_leaves_no_file_and_takes_over_a_dead_holders(tmp_path):
    from embodied_ppo.io.lock import LOCK_NAME, RunLock

    lock_file = tmp_path / LOCK_NAME
    with RunLock(tmp_path):
        assert lock_file.read_text().startswith(f"process {os.getpid()} on ")
        with pytest.raises(UserError, match=f"being trained by process {os.getpid()} on "):
            RunLock(tmp_path).acquire()
    assert not lock_file.exists()  # a refused attempt or a finished run leaves no trace
    # A file left by a holder killed with -9 holds no lock: the next run takes it over.
    lock_file.write_text("process 1 on elsewhere (since 2000-01-01 00:00:00)\n")
    with RunLock(tmp_path):
        assert lock_file.read_text().startswith(f"process {os.getpid()} on ")
    assert not lock_file.exists()


def test_the_run_lock_locks_the_file_at_its_path_when_the_holder_leaves_meanwhile(
    tmp_path, monkeypatch
):
    import fcntl

    from embodied_ppo.io.lock import LOCK_NAME, RunLock

    lock_file = tmp_path / LOCK_NAME
    real_flock, calls = fcntl.flock, []

    def flock_after_the_holder_left(fd, op):
        if not calls:  # the holder releases between our open and our flock: its file goes
            lock_file.unlink()
            lock_file.write_text("")
        calls.append(fd)
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_left)
    lock = RunLock(tmp_path).acquire()
    try:
        assert len(calls) == 2  # the orphan was dropped and the file at the path locked
        assert os.path.samestat(os.fstat(lock._file.fileno()), os.stat(lock_file))
    finally:
        lock.release()


def _plain_run_checkpoint(**more):
    """The entries every version wrote (no env state, no ranks)."""
    return {
        "config": {"env": {"id": "Pendulum-v1"}},
        "model_spec": {"obs_dim": 3},
        "model": {"w": torch.arange(3.0)},
        "optimizer": {"state": {}, "param_groups": [{"lr": 3e-4, "params": [0]}]},
        "reward_scaler": {"var": torch.ones(1)},
        "rng": {"python": (3, (1, 2), None)},
        "global_step": 64,
        "iteration": 2,
        **more,
    }


def test_a_run_checkpoint_of_an_older_version_reads_with_the_defaults_of_what_it_lacks():
    from embodied_ppo.io.checkpoint_state import EnvsSnapshot, RunCheckpoint

    state = RunCheckpoint.from_dict(_plain_run_checkpoint())
    assert state.global_step == 64 and state.iteration == 2
    assert state.envs == EnvsSnapshot() and state.envs.empty
    assert state.recent_returns == [] and state.lr_extension is None and state.kl_coef is None
    assert state.reference is None and state.ranks is None and state.world_size == 1
    assert state.package_version == "unknown" and state.extra == {}
    plain = state.to_dict()
    assert plain["envs"] is plain["collector_obs"] is plain["collector_recurrent"] is None
    assert "ranks" not in plain and "eval" not in plain
    # An entry this version does not know travels along, and the envelope stays io's.
    later = RunCheckpoint.from_dict(
        _plain_run_checkpoint(format=FORMAT, format_version=1, curriculum={"level": 3})
    )
    assert later.extra == {"curriculum": {"level": 3}}
    assert later.to_dict()["curriculum"] == {"level": 3} and "format" not in later.to_dict()


@pytest.mark.parametrize(
    "entry, value, message",
    [
        ("optimizer", None, "it holds no 'optimizer'"),
        ("model", [1, 2], "it holds a list as its 'model'"),
        ("global_step", "64", "it holds a str as its 'global_step'"),
    ],
)
def test_a_run_checkpoint_without_an_entry_names_it(entry, value, message):
    from embodied_ppo.io.checkpoint_state import RunCheckpoint

    data = _plain_run_checkpoint()
    if value is None:
        del data[entry]
    else:
        data[entry] = value
    with pytest.raises(ValueError, match=message):
        RunCheckpoint.from_dict(data)


def test_each_process_reads_its_own_part_of_a_distributed_checkpoint():
    from embodied_ppo.io.checkpoint_state import RunCheckpoint

    def part(k):
        return {
            "envs": {"members": [k]},
            "collector_obs": torch.full((2, 3), float(k)),
            "collector_recurrent": None,
            "rng": {"python": k},
            "reward_scaler": {"var": torch.full((1,), float(k))},
        }

    data = _plain_run_checkpoint(**part(0), ranks=[part(0), part(1)], world_size=2)
    state = RunCheckpoint.from_dict(data)
    own, note = state.local_view(1, 2)
    assert note is None and own.rng == {"python": 1} and own.envs.envs == {"members": [1]}
    assert torch.equal(own.reward_scaler["var"], torch.ones(1))
    assert torch.equal(own.envs.obs, torch.ones(2, 3))
    # Another number of processes: the weights carry over, the envs start fresh.
    other, note = state.local_view(0, 3)
    assert (
        other.envs.empty and note == "the checkpoint was written by 2 process(es), this run has 3"
    )
    assert torch.equal(other.model["w"], state.model["w"])
    # A one-process checkpoint in one process is read as it is.
    single = RunCheckpoint.from_dict(_plain_run_checkpoint(**part(0)))
    assert single.local_view(0, 1) == (single, None)
    # Written back, every part is where it was.
    assert [p["rng"] for p in state.to_dict()["ranks"]] == [{"python": 0}, {"python": 1}]
