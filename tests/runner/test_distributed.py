"""torch.distributed on CPU with Gloo: N processes x E envs learn as one process with N*E envs."""

from __future__ import annotations

import json
import os
import random
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

# 16 steps x E envs per process.
BASE = [
    "env.id=Pendulum-v1",
    "model.hidden_sizes=[32,32]",
    "algorithm.rollout_steps=16",
    "algorithm.update_epochs=3",
    "trainer.total_steps=256",
    "trainer.device=cpu",
    "trainer.checkpoint_interval=1",
    "trainer.compile=false",  # the compiled update: the four-minibatch case turns it on
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


def run_worker(
    tmp: Path, name: str, nproc: int, envs_per_process: int, *extra: str, minibatch: int = 64
) -> list[dict]:
    """Train with `nproc` processes of `envs_per_process` envs each; every process's weights.
    `minibatch`: algorithm.minibatch_size, transitions of all processes (64: one per epoch with
    four envs in all)."""
    out = tmp / name
    out.mkdir()
    args = [
        str(WORKER),
        str(ROOT / "configs" / "pendulum.yaml"),
        str(out),
        *BASE,
        f"env.num_envs={envs_per_process}",
        f"algorithm.minibatch_size={minibatch}",
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


def assert_close(a: dict, b: dict, atol: float, what: str = "") -> None:
    for k, v in a.items():
        assert torch.allclose(v.double(), b[k].double(), atol=atol), (
            what,
            k,
            (v.double() - b[k].double()).abs().max(),
        )


# Each variant: (name, minibatch_size of all processes, overrides).
VARIANTS = [
    ("one-minibatch", 64, []),
    # The advantages normalized over all processes, the values recomputed per process.
    ("recompute-advantages", 64, ["algorithm.recompute_advantages=true"]),
    # Four minibatches per epoch: each process trains on its share of every minibatch.
    ("four-minibatches", 16, []),
    ("four-minibatches-compiled", 16, ["trainer.compile=true"]),
    ("micro-batches", 16, ["algorithm.micro_batch_size=4"]),
    # Whole env sequences per minibatch.
    ("sequences", 32, ["algorithm.loss_agg_func=seq-mean-token-mean"]),
    # Recurrent chunks of 8 steps, four minibatches of two chunks.
    ("recurrent-chunks", 16,
     ["model.recurrent=gru", "model.recurrent_size=16", "algorithm.sequence_length=8"]),
    # Group advantages over pairs of envs, one episode each (a group never spans two
    # processes).
    # env.num_envs counting all processes' envs, split evenly.
    ("envs-split-globally", 16, ["env.num_envs=4", "env.num_envs_scope=global"]),
    ("grpo", 16, ["algorithm.adv_type=grpo", "algorithm.group_size=2",
                  "algorithm.loss_type=actor", "env.max_episode_steps=16"]),
    # The env's mirror (augmentation and the mirror loss), RND's intrinsic reward (its
    # predictor trained on every process's rows) and value normalization, together.
    ("symmetry-rnd-value-norm", 16,
     ["env.id=EmbodiedPPOTestMirrorPendulum-v0", "env.imports=[mirror_envs]",
      "algorithm.symmetry.augment=true", "algorithm.symmetry.mirror_loss_coef=0.5",
      "algorithm.rnd.enabled=true", "algorithm.normalize_value=true"]),
    ("symmetry-recurrent", 16,
     ["env.id=EmbodiedPPOTestMirrorPendulum-v0", "env.imports=[mirror_envs]",
      "algorithm.symmetry.augment=true", "algorithm.symmetry.mirror_loss_coef=0.5",
      "model.recurrent=gru", "model.recurrent_size=16", "algorithm.sequence_length=8"]),
]  # fmt: skip


def run_variants(tmp: Path, name: str, nproc: int, envs_per_process: int) -> dict[str, list]:
    """Every variant of VARIANTS trained one after the other in the same `nproc` processes
    (a run leaves nothing behind for the next: tests/app/test_api.py); their weights by name."""
    out = tmp / name
    out.mkdir()
    spec = tmp / f"{name}.json"
    spec.write_text(json.dumps(
        [[v, [f"algorithm.minibatch_size={m}", *extra]] for v, m, extra in VARIANTS]
    ))  # fmt: skip
    args = [str(WORKER), "--variants", str(spec), str(ROOT / "configs" / "pendulum.yaml"),
            str(out), *BASE, f"env.num_envs={envs_per_process}"]  # fmt: skip
    if nproc == 1:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                              env=env(), timeout=600)  # fmt: skip
    else:
        proc = torchrun(nproc, *args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {v: [torch.load(out / v / f"rank{r}.pt") for r in range(nproc)] for v, *_ in VARIANTS}


def test_two_processes_update_like_one_process_with_all_envs(tmp_path):
    two = run_variants(tmp_path, "two", 2, 2)
    one = run_variants(tmp_path, "one", 1, 4)
    for variant, *_ in VARIANTS:
        # Every process holds the same weights ...
        for k, v in two[variant][0].items():
            assert torch.equal(v, two[variant][1][k]), (variant, k)
        # ... and they are the weights of one process stepping all four envs.
        assert_close(two[variant][0], one[variant][0], atol=1e-5, what=variant)


def test_a_per_process_minibatch_is_the_processes_minibatches_together(tmp_path):
    # minibatch_scope per_process (what runs saved by earlier versions meant): 2 x 8 per step.
    two = run_worker(tmp_path, "two", 2, 2, "algorithm.minibatch_scope=per_process", minibatch=8)
    one = run_worker(tmp_path, "one", 1, 4, minibatch=16)
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


def rank_pids(marker: str, rank: int, restart: int) -> list[int]:
    """Processes of rank `rank` of the job whose command line holds `marker`, as the elastic
    agent started them the `restart`-th time."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue
        if (marker in cmdline and f"RANK={rank}" in environ
                and f"TORCHELASTIC_RESTART_COUNT={restart}" in environ):  # fmt: skip
            found.append(int(proc.name))
    return found


ELASTIC = [*BASE, "trainer.total_steps=640", "env.num_envs=2", "trainer.dist_timeout=10",
           "algorithm.minibatch_size=16", "optim.schedule=constant"]  # fmt: skip


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_a_rank_killed_mid_run_is_restarted_and_the_run_ends_as_if_it_had_not_been(tmp_path):
    """torchrun --max-restarts restarts the processes when one dies; they find the run their
    first start created and resume it from its latest checkpoint by themselves, and the final
    weights are those of an uninterrupted run (CPU)."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train = ["-m", "embodied_ppo", "train", "configs/pendulum.yaml", *ELASTIC]
    done = torchrun(2, *train, f"trainer.run_dir={straight}")
    assert done.returncode == 0, done.stderr[-2000:]
    at = random.Random().randint(2, 7)  # any iteration: the outcome must not depend on it
    # --standalone: a c10d rendezvous of its own, which every restart joins anew.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max-restarts=1", *train,
           f"trainer.run_dir={killed}"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        metrics = killed / "metrics.jsonl"
        deadline = time.time() + 240
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= at):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.02)
        victims = rank_pids(str(killed), rank=1, restart=0)
        assert len(victims) == 1, victims
        os.kill(victims[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (at, err[-3000:])
    assert "torchrun restarted the run's processes (restart 1): resuming" in out, (at, out)
    a, b = load_checkpoint(straight), load_checkpoint(killed)
    assert a["global_step"] == b["global_step"] == 640
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), (at, k)


def test_each_restart_joins_under_its_own_keys_in_the_agents_store(monkeypatch):
    """The elastic agent lends one store to every start of the processes: what a start before
    the restart wrote there (a dead process's address) is not what the restarted ones read."""
    import datetime

    import torch.distributed as dist

    from embodied_ppo.runner import distributed

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setenv("WORLD_SIZE", "2")
    timeout = datetime.timedelta(seconds=5)
    stores = {}
    for restart in ("0", "1"):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", restart)
        stores[restart] = distributed._restart_store(timeout)
    stores["0"].set("rank_1", "127.0.0.1:1111")
    stores["1"].set("rank_1", "127.0.0.1:2222")
    assert stores["0"].get("rank_1") == b"127.0.0.1:1111"
    assert stores["1"].get("rank_1") == b"127.0.0.1:2222"
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")  # torch's own rendezvous
    assert distributed._restart_store(timeout) is None


def test_two_machines_update_like_one_process_with_all_envs(tmp_path):
    """Two torchrun "machines" on this host (c10d rendezvous on localhost, one process each,
    as docs/scaling.md's commands start them on two hosts) learn as one process with their
    envs together, with several minibatches per epoch."""
    out = tmp_path / "nodes"
    out.mkdir()
    args = [str(WORKER), str(ROOT / "configs" / "pendulum.yaml"), str(out), *BASE,
            "env.num_envs=2", "algorithm.minibatch_size=16", f"trainer.run_dir={out / 'run'}"]  # fmt: skip
    port = free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc_per_node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=localhost:{port}",
                "--rdzv-id=two-nodes",
                *args,
            ],
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err[-3000:]
    two = [torch.load(out / f"rank{r}.pt") for r in range(2)]
    one = run_worker(tmp_path, "one", 1, 4, minibatch=16)
    for k, v in two[0].items():
        assert torch.equal(v, two[1][k]), k
    assert_close(two[0], one[0], atol=1e-5)


def cli_run(run: Path, nproc: int, *overrides: str) -> dict:
    """Train Pendulum through the command line (`embodied-ppo torchrun ... train` for several
    processes, `embodied-ppo train` for one), as a user starts it: the training is polled by the
    stop signals' agreement step every iteration. The final checkpoint's weights."""
    launch = ["torchrun", f"--nproc_per_node={nproc}", f"--master_port={free_port()}"]
    config = str(ROOT / "configs" / "pendulum.yaml")
    cmd = [sys.executable, "-m", "embodied_ppo", *(launch if nproc > 1 else []), "train", config]
    cmd += [*BASE, f"trainer.run_dir={run}", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_checkpoint(run)["model"]


@pytest.mark.parametrize(
    "device, backend, atol",
    [
        ("cpu", "gloo", 1e-5),
        pytest.param(
            "cuda",
            "nccl",
            1e-4,  # CUDA kernels may sum in another order
            marks=pytest.mark.skipif(
                torch.cuda.device_count() < 2, reason="NCCL needs a GPU per process"
            ),
        ),
    ],
)
def test_two_processes_from_the_command_line_update_like_one_with_all_envs(
    tmp_path, device, backend, atol
):
    """Started as a user starts it, so every collective of the command's path runs (the
    graceful stop's agreement included): on the CPU with Gloo, and on one GPU per process with
    NCCL, whose collectives take only tensors on the process's GPU."""
    common = [f"trainer.device={device}", "algorithm.minibatch_size=16"]
    two = cli_run(tmp_path / "two", 2, *common, "env.num_envs=2", f"trainer.dist_backend={backend}")
    one = cli_run(tmp_path / "one", 1, *common, "env.num_envs=4")
    assert_close(two, one, atol=atol)
