"""Graceful stop: SIGINT / SIGTERM finish the iteration, save, exit 130 / 143; resume continues."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from support import ROOT

from embodied_ppo.app import cli
from embodied_ppo.app.signals import GracefulStop, Interrupted
from embodied_ppo.config.loading import load_config
from embodied_ppo.io.checkpoint import load_checkpoint
from embodied_ppo.runner.trainer import Trainer

# A CartPole run long enough to be interrupted; constant lr, so that where it stops does not
# change the schedule, and one thread, so that it computes exactly what this process computes.
LONG = [
    "env.num_envs=2",
    "model.hidden_sizes=[16]",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16",
    "algorithm.update_epochs=2",
    "optim.schedule=constant",
    "trainer.total_steps=10000000",
    "trainer.torch_threads=1",
    "trainer.device=cpu",
]


def test_first_signal_asks_second_interrupts():
    previous = signal.getsignal(signal.SIGINT)
    with GracefulStop() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop() and stop.exit_code == 143
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGINT)
        assert info.value.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is previous


def test_stop_request_saves_at_the_iteration_boundary_and_resume_is_exact(tmp_path):
    cfg = tiny_config(trainer={"total_steps": 160, "checkpoint_interval": 100})
    straight = Trainer(cfg, tmp_path / "straight", progress_stream=io.StringIO())
    straight.train()

    polls = iter([False, False, True])  # asked to stop during the second iteration
    stopped = Trainer(cfg, tmp_path / "run", progress_stream=io.StringIO())
    summary = stopped.train(should_stop=lambda: next(polls))
    assert summary["stopped"] and summary["global_step"] == 64
    assert stopped.last_checkpoint == tmp_path / "run" / "checkpoints" / "ckpt_64.pt"

    resumed = Trainer(
        cfg,
        tmp_path / "run",
        resume=load_checkpoint(tmp_path / "run"),
        progress_stream=io.StringIO(),
    )
    assert not resumed.train()["stopped"]
    for k, v in straight.policy.state_dict().items():
        assert torch.equal(resumed.policy.state_dict()[k], v), k


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "embodied_ppo", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        start_new_session=True,  # its own process group, as a shell job has
    )


def _wait_for_checkpoint(proc: subprocess.Popen, run: Path) -> None:
    """Until the run has written its first checkpoint (bounded: the test must not hang)."""
    for _ in range(2400):
        if (run / "checkpoints" / "latest.pt").exists():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


def _stop_with(signum: int, run: Path, *extra: str, group: bool = False) -> tuple[int, str]:
    proc = _start("configs/cartpole.yaml", *LONG, *extra, f"trainer.run_dir={run}")
    _wait_for_checkpoint(proc, run)
    if group:  # like Ctrl-C in a terminal: every process of the job gets it
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_cli_sigint_stops_gracefully_and_resume_matches_an_uninterrupted_run(tmp_path, capsys):
    run = tmp_path / "run"
    code, err = _stop_with(signal.SIGINT, run, "trainer.checkpoint_interval=2")
    assert code == 130, err
    assert "SIGINT received: finishing this iteration" in err
    assert f"continue with `embodied-ppo train --resume {run}`" in err
    assert "Traceback" not in err
    step = load_checkpoint(run)["global_step"]
    assert step > 0 and f"stopped at step {step:,}" in err

    # Resume for two more iterations (in this process: the same code path as the command).
    total = step + 64
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--resume", str(run), f"trainer.total_steps={total}"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert f"resuming {run} at step {step:,}" in out and "note:" not in out
    final = load_checkpoint(run)
    assert final["global_step"] == total

    # The result is the uninterrupted run's, bit for bit.
    cfg = load_config(ROOT / "configs/cartpole.yaml", [*LONG, f"trainer.total_steps={total}"])
    straight = Trainer(cfg, tmp_path / "straight", progress_stream=io.StringIO())
    straight.train()
    for k, v in straight.policy.state_dict().items():
        assert torch.equal(final["model"][k], v), k


@pytest.mark.parametrize("envs", [["env.backend=async"], ["env.processes=2"]])
def test_cli_sigterm_to_the_job_with_env_workers_stops_gracefully_with_143(tmp_path, envs):
    # The env worker processes get the signal too; they must keep stepping until the run has
    # saved.
    run = tmp_path / "run"
    code, err = _stop_with(signal.SIGTERM, run, *envs, "trainer.checkpoint_interval=3", group=True)
    assert code == 143, err
    assert "environment" not in err  # no worker died
    assert err.count("SIGTERM received") == 1  # the workers ignore it; the main process decides
    assert "SIGTERM received" in err and "--resume" in err and "Traceback" not in err
    state = load_checkpoint(run)
    assert f"stopped at step {state['global_step']:,}" in err


def test_cli_second_sigint_stops_at_once(tmp_path):
    run = tmp_path / "run"
    # Big enough that an iteration (about 2 s here) outlasts the two signals.
    proc = _start(
        "configs/cartpole.yaml",
        *LONG,
        "model.hidden_sizes=[256,256]",
        "algorithm.rollout_steps=2048",
        "algorithm.minibatch_size=4096",
        "algorithm.update_epochs=50",
        "trainer.checkpoint_interval=1",
        f"trainer.run_dir={run}",
    )
    _wait_for_checkpoint(proc, run)
    # Into the next iteration: a signal landing before its start would stop the run there, and
    # the run would be over before the second signal.
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopped at once" in err and "Traceback" not in err
    assert load_checkpoint(run)["global_step"] % 4096 == 0  # the last complete checkpoint


def test_a_second_signal_stops_at_once_whatever_exception_it_surfaced_as(
    tmp_path, monkeypatch, capsys
):
    """A second SIGINT landing inside torch.compile's guard evaluation reached the command as a
    RuntimeError ("Recompilation triggered with skip_guard_eval_unsafe stance") and the run
    ended with a traceback and status 1. Whatever exception the interruption surfaces as, the
    command stops at once, as asked: status 130, one line, the last checkpoint named."""
    from embodied_ppo.app import train as train_module

    def interrupted_inside_a_library(trainer, callbacks, stop):
        os.kill(os.getpid(), signal.SIGINT)  # the first: a stop request
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the second, inside the library's code
        except KeyboardInterrupt as exc:
            raise RuntimeError("the library's own error") from exc

    monkeypatch.setattr(train_module, "run_training", interrupted_inside_a_library)
    run = tmp_path / "run"
    config = str(ROOT / "configs" / "cartpole.yaml")
    with pytest.raises(SystemExit) as info:
        cli.main(["train", config, *LONG, f"trainer.run_dir={run}"])
    err = capsys.readouterr().err
    assert info.value.code == 130, err
    assert "stopped at once" in err and f"--resume {run}" in err


def test_an_error_without_a_second_signal_still_propagates(tmp_path, monkeypatch):
    from embodied_ppo.app import train as train_module

    def fails(trainer, callbacks, stop):
        raise RuntimeError("a real failure")

    monkeypatch.setattr(train_module, "run_training", fails)
    config = str(ROOT / "configs" / "cartpole.yaml")
    with pytest.raises(RuntimeError, match="a real failure"):
        cli.main(["train", config, *LONG, f"trainer.run_dir={tmp_path / 'r'}"])
