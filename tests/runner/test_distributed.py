"""torch.distributed on CPU with Gloo: N processes x E envs learn as one process with N*E envs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support import ROOT

from embodied_ppo.io.checkpoint import load_checkpoint

WORKER = ROOT / "tests" / "dist_worker.py"

# 16 steps x E envs per process; one minibatch per epoch (the whole batch of each process).
BASE = [
    "env.id=Pendulum-v1",
    "model.hidden_sizes=[32,32]",
    "algorithm.rollout_steps=16",
    "algorithm.update_epochs=3",
    "trainer.total_steps=256",
    "trainer.device=cpu",
    "trainer.checkpoint_interval=1",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


def torchrun(nproc: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--master_port={free_port()}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env(), timeout=timeout)


def run_worker(tmp: Path, name: str, nproc: int, envs_per_process: int, *extra: str) -> list[dict]:
    out = tmp / name
    out.mkdir()
    args = [
        str(WORKER),
        str(ROOT / "configs" / "pendulum.yaml"),
        str(out),
        *BASE,
        f"env.num_envs={envs_per_process}",
        f"algorithm.minibatch_size={16 * envs_per_process}",
        f"trainer.run_dir={out / 'run'}",
        *extra,
    ]
    if nproc == 1:
        proc = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env(),
            timeout=300,
        )
    else:
        proc = torchrun(nproc, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt") for r in range(nproc)]


def assert_close(a: dict, b: dict, atol: float) -> None:
    for k, v in a.items():
        assert torch.allclose(v.double(), b[k].double(), atol=atol), (
            k,
            (v.double() - b[k].double()).abs().max(),
        )


@pytest.mark.parametrize("extra", [[], ["algorithm.recompute_advantages=true"]])
def test_two_processes_update_like_one_process_with_all_envs(tmp_path, extra):
    # recompute_advantages: each process values its own envs again, and the advantages are
    # normalized over all processes, as over all envs in one.
    two = run_worker(tmp_path, "two", 2, 2, *extra)
    one = run_worker(tmp_path, "one", 1, 4, *extra)
    # Every process holds the same weights ...
    for k, v in two[0].items():
        assert torch.equal(v, two[1][k]), k
    # ... and they are the weights of one process stepping all four envs.
    assert_close(two[0], one[0], atol=1e-5)


def test_envs_split_globally_give_the_same_run(tmp_path):
    two = run_worker(
        tmp_path, "global", 2, 4, "env.num_envs_scope=global", "algorithm.minibatch_size=32"
    )
    one = run_worker(tmp_path, "one", 1, 4)
    assert_close(two[0], one[0], atol=1e-5)


def cli_args(run: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "embodied_ppo",
        "train",
        "configs/pendulum.yaml",
        *BASE,
        "env.num_envs=2",
        "algorithm.minibatch_size=32",
        f"trainer.run_dir={run}",
        *extra,
    ]


def test_distributed_resume_continues_the_run(tmp_path):
    # A constant learning rate: the linear schedule depends on total_steps, which the resume raises.
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert torchrun(2, *cli_args(straight, "optim.schedule=constant")).returncode == 0
    first = torchrun(2, *cli_args(split, "trainer.total_steps=128", "optim.schedule=constant"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert load_checkpoint(split)["world_size"] == 2
    again = torchrun(
        2, "-m", "embodied_ppo", "train", "--resume", str(split), "trainer.total_steps=256"
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stdout
    a, b = load_checkpoint(straight), load_checkpoint(split)
    assert a["global_step"] == b["global_step"] == 256
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k


def launch_rank(rank: int, port: int, run: Path, *extra: str) -> subprocess.Popen:
    e = {
        **env(),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
    }
    args = cli_args(run, "trainer.total_steps=100000", "trainer.dist_timeout=10", *extra)
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_a_lost_rank_stops_the_others_with_a_clear_message(tmp_path, how):
    run, port = tmp_path / "run", free_port()
    procs = [launch_rank(r, port, run) for r in range(2)]
    try:
        deadline = time.time() + 120
        while not (run / "checkpoints" / "latest.pt").exists():
            assert time.time() < deadline, "no checkpoint appeared"
            assert procs[0].poll() is None, procs[0].communicate()[1]
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL if how == "dies" else signal.SIGSTOP)
        _, err = procs[0].communicate(timeout=120)
        assert procs[0].returncode == 1
        lines = [x for x in err.strip().splitlines() if x.startswith("embodied-ppo")]
        assert lines and "another rank died, hangs or timed out" in lines[-1], err[-2000:]
        assert "Traceback" not in err
        load_checkpoint(run)  # the last good checkpoint is intact
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()


LONG_RUN = [
    "env.num_envs=2",
    "model.hidden_sizes=[16]",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16",
    "algorithm.update_epochs=2",
    "trainer.total_steps=100000000",
    "trainer.device=cpu",
    "trainer.compile=false",
    "trainer.checkpoint_interval=2",
]


def start_launcher(run: Path) -> subprocess.Popen:
    """`embodied-ppo torchrun` with 2 processes, in a session of its own (a shell job)."""
    cmd = [sys.executable, "-m", "embodied_ppo", "torchrun", "--nproc_per_node=2",
           f"--master_port={free_port()}", "train", "configs/cartpole.yaml", *LONG_RUN,
           f"trainer.run_dir={run}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env(), start_new_session=True)  # fmt: skip
    for _ in range(2400):
        if (run / "checkpoints" / "latest.pt").exists():
            return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


@pytest.mark.parametrize(
    "signum, to_group, code",
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
)
def test_the_torchrun_launcher_stops_like_one_process(tmp_path, signum, to_group, code):
    # Ctrl-C reaches every process of the job; a `kill` reaches the launcher alone.
    run = tmp_path / "run"
    proc = start_launcher(run)
    time.sleep(0.3)  # inside an iteration
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=180)
    name = signal.Signals(signum).name
    assert proc.returncode == code, err
    assert err.count(f"{name} received") == 1, err  # one message for the run
    assert err.count("stopped at step") == 1 and "Traceback" not in err + out, err
    step = load_checkpoint(run)["global_step"]
    assert f"stopped at step {step:,}" in err
    assert "continue with `embodied-ppo torchrun --nproc_per_node=2 --master_port=" in err
    assert f"train --resume {run}`" in err
