"""Never lose a run: kills mid-write, env failures, bad checkpoints on --resume, disk errors."""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import TINY, tiny_config
from gymnasium import spaces
from support import ROOT

from embodied_ppo.app import cli
from embodied_ppo.core.errors import TrainingError
from embodied_ppo.io.checkpoint import (
    FORMAT,
    load_checkpoint,
    remove_stale_temp_files,
    save_checkpoint,
)
from embodied_ppo.io.metrics import trim_metrics
from embodied_ppo.runner.trainer import Trainer
from embodied_ppo.vecenv.seeding import env_seeds

# ----------------------------------------------------------------------- SIGKILL mid-write
# A child that writes checkpoints with a 16 MB tensor in a loop. When told to, it stops inside
# one write (at the fsync of the temp file, or before linking latest.pt) and says so, so the
# kill lands there for certain.
_WRITER = textwrap.dedent(
    """
    import os, sys, time, torch
    import embodied_ppo.io.checkpoint as ck
    run, hang_at, hang_step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    step = 0
    real = {"fsync": os.fsync, "link": os.link}

    def hang(name):
        def patched(*args):
            if step == hang_step:
                print("writing", flush=True)
                time.sleep(60)
            return real[name](*args)
        return patched

    if hang_at in real:
        setattr(os, hang_at, hang(hang_at))
    big = torch.empty(4_000_000)
    while True:
        step += 1
        big.fill_(step)
        ck.save_checkpoint(run, {"global_step": step, "big": big}, step)
        old = ck.checkpoints_dir(run) / f"ckpt_{step - 2}.pt"
        if old.exists():
            old.unlink()
        print(f"saved {step}", flush=True)
    """
)


def _writer(run: Path, hang_at: str, hang_step: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(run), hang_at, str(hang_step)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _check_latest(run: Path) -> int:
    state = load_checkpoint(run)
    step = state["global_step"]
    assert torch.equal(state["big"], torch.full((4_000_000,), float(step)))
    return step


@pytest.mark.parametrize("hang_at", ["fsync", "link"])
def test_sigkill_in_the_middle_of_a_checkpoint_write(tmp_path, hang_at):
    proc = _writer(tmp_path, hang_at, hang_step=3)
    try:
        for line in proc.stdout:
            if line.strip() == "writing":
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # latest.pt is the last complete checkpoint, whole and consistent.
    assert _check_latest(tmp_path) == 2
    leftovers = [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]
    if hang_at == "fsync":
        assert leftovers  # the killed writer's temp file ...
    else:
        assert load_checkpoint(tmp_path / "checkpoints" / "ckpt_3.pt")["global_step"] == 3
    assert sorted(remove_stale_temp_files(tmp_path)) == sorted(leftovers)  # ... is cleaned up
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_sigkill_at_arbitrary_moments_never_breaks_latest(tmp_path):
    """Kill a checkpoint-writing loop repeatedly after each save; latest.pt always loads."""
    last = 0
    for kill in range(2):
        proc = _writer(tmp_path, "none", hang_step=-1)
        try:
            # Let it save a different number of times before the kill, which then lands somewhere
            # inside the next write (serializing, writing, fsync, rename or link).
            for _ in range(kill + 1):
                assert proc.stdout.readline().startswith("saved")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        step = _check_latest(tmp_path)
        assert step >= 1
        last = step
        remove_stale_temp_files(tmp_path)
    assert last >= 1


# ----------------------------------------------------------------------------- env failures
class FaultyEnv(gym.Env):
    """Fails (raise / NaN reward / NaN observation) at its `at`-th step when seeded with `seed`."""

    observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, kind: str = "raise", seed: int = -1, at: int = 1) -> None:
        self.kind, self.fail_seed, self.at = kind, seed, at
        self.steps = 0
        self.faulty = False

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.faulty = seed == self.fail_seed
        return self.np_random.normal(size=3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        obs = self.np_random.normal(size=3).astype(np.float32)
        reward = 1.0
        if self.faulty and self.steps == self.at:
            if self.kind == "raise":
                raise RuntimeError("simulator diverged")
            if self.kind == "nan_reward":
                reward = float("nan")
            if self.kind == "nan_obs":
                obs[1] = np.inf
        return obs, reward, False, self.steps % 10 == 0, {}


if "EmbodiedPPOTestFaulty-v0" not in gym.registry:
    gym.register("EmbodiedPPOTestFaulty-v0", entry_point=FaultyEnv)


def pipes(monkeypatch, on: bool) -> None:
    """Env processes step by message (where `on`) or by doorbell, whatever this machine's cores
    would choose."""
    from embodied_ppo.vecenv import workers

    monkeypatch.setattr(workers, "can_spin", lambda processes, threads: not on)


def _faulty_config(kind: str, backend: str = "sync"):
    # Env 1 fails at its 40th step trained on (its 56th: the warm-up's 16 go before the first
    # rollout): iteration 2 (0-based) of 16 steps, after ckpt_32 and ckpt_64.
    # "processes": the sync backend with env 1 stepped in a worker process (its steps by
    # doorbell; "processes_pipes": by message).
    seed = env_seeds(0, 2)[1]
    env = {"backend": backend, "kwargs": {"kind": kind, "seed": seed, "at": 16 + 40}}
    if backend.startswith("processes"):
        env.update(backend="sync", processes=2)
    return tiny_config(
        "EmbodiedPPOTestFaulty-v0",
        env=env,
        trainer={"total_steps": 256, "checkpoint_interval": 1},
    )


@pytest.mark.parametrize(
    "kind, backend, message",
    [
        ("raise", "sync", "environment 1 raised RuntimeError in step: simulator diverged"),
        ("raise", "async", "environment 1 raised RuntimeError in step: simulator diverged"),
        ("raise", "processes", "environment 1 raised RuntimeError in step: simulator diverged"),
        (
            "raise",
            "processes_pipes",
            "environment 1 raised RuntimeError in step: simulator diverged",
        ),
        ("nan_reward", "processes", "environment 1 returned a non-finite reward nan"),
        ("nan_reward", "sync", "environment 1 returned a non-finite reward nan"),
        ("nan_obs", "sync", "environment 1 returned a non-finite observation"),
    ],
)
def test_env_failure_names_env_step_and_last_checkpoint(
    tmp_path, kind, backend, message, monkeypatch
):
    pipes(monkeypatch, backend == "processes_pipes")
    trainer = Trainer(_faulty_config(kind, backend), tmp_path, progress_stream=io.StringIO())
    if backend.startswith("processes"):
        assert trainer.envs.env.doorbell is (backend == "processes")
    with pytest.raises(TrainingError) as info:
        trainer.train()
    text = str(info.value)
    assert text.startswith("iteration 2: ") and message in text, text
    assert "at step 40 (global step 80)" in text
    assert text.endswith(f"last good checkpoint: {tmp_path / 'checkpoints' / 'ckpt_64.pt'}")
    assert "\n" not in text
    assert load_checkpoint(tmp_path)["global_step"] == 64


@pytest.mark.parametrize(
    "env, worker, message, last",
    [
        # Gymnasium's async backend: one process per env; worker 1 steps env 1.
        ({"backend": "async"}, 1, r"environment 1: its worker process \d+", 64),
        # The envs split over 2 processes: the one worker steps envs 2 and 3.
        ({"num_envs": 4, "processes": 2}, 0, r"environments 2-3: their worker process \d+", 128),
        ({"num_envs": 4, "processes": 2}, 0, r"environments 2-3: their worker process \d+", 128),
    ],
    ids=["async", "processes", "processes_pipes"],
)
def test_a_dead_env_worker_stops_the_run_and_names_its_envs(
    tmp_path, env, worker, message, last, monkeypatch, request
):
    pipes(monkeypatch, request.node.callspec.id == "processes_pipes")
    cfg = tiny_config(
        "CartPole-v1", env=env, trainer={"total_steps": 512, "checkpoint_interval": 1}
    )
    trainer = Trainer(cfg, tmp_path, progress_stream=io.StringIO())
    envs, real_step = trainer.envs, trainer.envs.step
    process = envs.env.processes[worker]

    def step(action):
        if envs.steps == 39:  # kill the worker before the 40th step (iteration 2)
            os.kill(process.pid, signal.SIGKILL)
            process.join(timeout=30)
        return real_step(action)

    envs.step = step
    with pytest.raises(
        TrainingError,
        match=rf"iteration 2: {message} died \(killed by SIGKILL\) at step 40 .*ckpt_{last}\.pt",
    ):
        trainer.train()
    assert all(not p.is_alive() for p in envs.env.processes)  # the others were shut down
    assert load_checkpoint(tmp_path)["global_step"] == last


def test_checkpoint_write_failure_stops_the_run(tmp_path, monkeypatch):
    import embodied_ppo.runner.run_state as trainer_module

    trainer = Trainer(
        tiny_config(trainer={"checkpoint_interval": 1}), tmp_path, progress_stream=io.StringIO()
    )
    real, calls = trainer_module.save_checkpoint, {"n": 0}

    def full_disk(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "save_checkpoint", full_disk)
    with pytest.raises(
        TrainingError,
        match=r"iteration 2: cannot write a checkpoint .*No space left "
        r"on device.*last good checkpoint: .*ckpt_32\.pt",
    ):
        trainer.train()
    assert load_checkpoint(tmp_path)["global_step"] == 32


# ------------------------------------------------------------ --resume with bad checkpoints


def _main(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("base") / "run"
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "configs/cartpole.yaml", *TINY, f"trainer.run_dir={run}"])
    assert info.value.code == 0
    return run


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/embodied_ppo_pwned_resume",))


def _bad_latest(kind: str, good: bytes, tmp_path: Path) -> bytes:
    if kind == "truncated":
        return good[: len(good) // 3]
    if kind == "random":
        return np.random.default_rng(0).bytes(len(good))
    if kind == "empty":
        return b""
    if kind == "malicious":
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "format_version": 1, "x": _Evil()}, buf)
        return buf.getvalue()
    if kind == "other_task":
        Trainer(
            tiny_config("Pendulum-v1", trainer={"total_steps": 32}),
            tmp_path / "pd",
            progress_stream=io.StringIO(),
        ).train()
        return (tmp_path / "pd" / "checkpoints" / "latest.pt").read_bytes()
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind, fragment",
    [
        ("truncated", "not a readable checkpoint"),
        ("random", "not a readable checkpoint"),
        ("empty", "not a readable checkpoint"),
        ("malicious", "refused to load: it asks to import posix.system"),
        ("other_task", "the checkpoint was not written by this run's config"),
    ],
)
def test_resume_refuses_a_bad_latest_checkpoint_and_keeps_it(
    tmp_path, capsys, trained_run, kind, fragment
):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    latest = run / "checkpoints" / "latest.pt"
    bad = _bad_latest(kind, latest.read_bytes(), tmp_path)
    latest.unlink()  # a hard link to ckpt_64.pt: replace it, do not write through it
    latest.write_bytes(bad)
    before = sorted((p.name, p.read_bytes()) for p in run.rglob("*") if p.is_file())
    code, out, err = _main(capsys, "train", "--resume", run, "trainer.total_steps=128")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("embodied-ppo: error:") and fragment in lines[0]
    assert "Traceback" not in out + err and "weights_only" not in err
    assert not os.path.exists("/tmp/embodied_ppo_pwned_resume")
    # Nothing was changed, nothing half-written.
    assert sorted((p.name, p.read_bytes()) for p in run.rglob("*") if p.is_file()) == before


def test_resume_before_the_first_checkpoint_starts_over(tmp_path, capsys, trained_run):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    shutil.rmtree(run / "checkpoints")  # killed before its first checkpoint
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / ".ckpt_32.pt.x1y2.tmp").write_bytes(b"partial")
    code, out, _ = _main(capsys, "train", "--resume", run)
    assert code == 0 and "no checkpoint yet" in out
    state = load_checkpoint(run)
    reference = load_checkpoint(trained_run)
    assert state["global_step"] == 64
    for k, v in reference["model"].items():
        assert torch.equal(state["model"][k], v)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_64.pt", "latest.pt"]
    steps = [line for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2  # the first attempt's records were replaced, not duplicated


def test_missing_latest_suggests_the_newest_checkpoint(tmp_path, capsys, trained_run):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "checkpoints" / "latest.pt").unlink()
    code, _, err = _main(capsys, "train", "--resume", run, "trainer.total_steps=128")
    assert code == 2 and "to resume from ckpt_64.pt, copy it to latest.pt" in err


def test_trim_metrics_keeps_whole_records_up_to_the_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"global_step": 1}\n{"global_step": 2}\n{"global_step": 3}\n{"glob')
    assert trim_metrics(path, 2) == 2
    assert path.read_text() == '{"global_step": 1}\n{"global_step": 2}\n'
    assert trim_metrics(path, 2) == 0
    assert trim_metrics(tmp_path / "absent.jsonl", 5) == 0


def test_stale_temp_files_are_never_loaded(tmp_path):
    save_checkpoint(tmp_path, {"global_step": 1}, 1)
    ckpts = tmp_path / "checkpoints"
    (ckpts / ".ckpt_2.pt.abcd.tmp").write_bytes(b"half a checkp")
    (ckpts / ".latest.pt.123.link").write_bytes(b"")
    assert load_checkpoint(tmp_path)["global_step"] == 1
    assert len(remove_stale_temp_files(tmp_path)) == 2
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt_1.pt", "latest.pt"]


def test_a_start_killed_while_writing_its_config_can_be_started_again(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".config.yaml.k1ll3d.tmp").write_text("env:\n  id: Cart")
    code, _, err = _main(capsys, "train", "configs/cartpole.yaml", *TINY, f"trainer.run_dir={run}")
    assert code == 0, err
    assert load_checkpoint(run)["global_step"] == 64
    assert not list(run.glob(".config.yaml.*"))
