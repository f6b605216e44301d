"""Fault injection: SIGKILL a training run again and again, resume it each time, check nothing is lost.

The script trains a small config twice through the command line:

1. a reference run, uninterrupted;
2. the same run, killed with SIGKILL N times and resumed (`embodied-ppo train --resume`) after
   each kill. The kills cycle through three moments: during startup (before any training), at a
   random point of training (collection, update, logging or a checkpoint write), and in the
   middle of a checkpoint write (it waits for a new checkpoint temp file to appear).

After every kill it loads every checkpoint of the run (`weights_only=True`) and checks that
`latest.pt` never moves backwards. At the end it compares the resumed run with the reference:
parameters, optimizer state, normalizer statistics and RNG state bit for bit, and metrics.jsonl
record for record (wall-time columns aside). With `--backend async` it also checks that no env
worker outlives its killed parent. The report is printed as Markdown (and written to --report).

Examples:
    python scripts/fault_injection.py --kills 12
    python scripts/fault_injection.py --env hopper --backend async --kills 6
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from embodied_ppo.io.checkpoint import load_checkpoint  # noqa: E402

# Small but not tiny: wide layers make each checkpoint a few MB, so writes take long enough to
# be hit; one checkpoint per iteration; one torch thread so every process computes the same.
TASKS = {
    "cartpole": [
        "configs/cartpole.yaml",
        "env.num_envs=4",
        "model.hidden_sizes=[256,256]",
        "algorithm.rollout_steps=32",
        "algorithm.minibatch_size=64",
        "algorithm.update_epochs=10",
        "trainer.total_steps=38400",
    ],
    "hopper": [
        "configs/hopper.yaml",
        "env.num_envs=4",
        "env.max_episode_steps=100",
        "model.hidden_sizes=[256,256]",
        "algorithm.rollout_steps=32",
        "algorithm.minibatch_size=64",
        "algorithm.update_epochs=10",
        "trainer.total_steps=25600",
    ],
}
COMMON = ["trainer.checkpoint_interval=1", "trainer.torch_threads=1", "trainer.device=cpu"]
TIMING = {"time", "charts/SPS", "charts/collect_time", "charts/update_time"}


def snapshot(work: Path) -> Path:
    """A copy of the package and configs: every run of the experiment uses the same code, even
    if the working tree changes while it runs."""
    code = work / "code"
    shutil.rmtree(code, ignore_errors=True)
    for name in ("embodied_ppo", "configs"):
        shutil.copytree(ROOT / name, code / name, ignore=shutil.ignore_patterns("__pycache__"))
    return code


def train(code: Path, args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # the child keeps its own handle
        return subprocess.Popen(
            [sys.executable, "-m", "embodied_ppo", "train", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=code,  # `python -m` imports the snapshot from here
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )


def wait_for_start(proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    """Until the run has built its trainer (it prints "training ..." or "resuming ...")."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "training " in text or "resuming " in text:
            return
        time.sleep(0.01)


def temp_files(run: Path) -> list[str]:
    folder = run / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def wait_for_write(proc: subprocess.Popen, run: Path, timeout: float) -> bool:
    """Poll until a new checkpoint temp file exists (a write is under way) or the process ends.

    Temp files already there were left by the previous kill (the resume removes them).
    """
    end = time.monotonic() + timeout
    folder = run / "checkpoints"
    old = set(temp_files(run))
    while time.monotonic() < end and proc.poll() is None:
        try:
            if any(name.startswith(".") and name not in old for name in os.listdir(folder)):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.0005)
    return False


def verify_checkpoints(run: Path) -> tuple[int, int | None]:
    """Load every checkpoint of `run`; returns (how many loaded, latest.pt's global step)."""
    folder = run / "checkpoints"
    if not folder.is_dir():
        return 0, None
    count = 0
    for path in sorted(folder.glob("*.pt")):
        load_checkpoint(path)  # raises on anything unreadable
        count += 1
    latest = folder / "latest.pt"
    return count, load_checkpoint(latest)["global_step"] if latest.exists() else None


def orphans(run: Path) -> list[int]:
    """Processes whose command line names `run` (env workers left behind by a killed parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(run) in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def tensors_equal(a: Any, b: Any, where: str, diffs: list[str]) -> None:
    """Compare two checkpoint values recursively, bit for bit; record what differs."""
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)):
            diffs.append(where)
    elif isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            diffs.append(where)
            return
        for k in a:
            tensors_equal(a[k], b[k], f"{where}.{k}", diffs)
    elif isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            diffs.append(where)
            return
        for i, (x, y) in enumerate(zip(a, b)):
            tensors_equal(x, y, f"{where}[{i}]", diffs)
    elif a != b:
        diffs.append(where)


def metrics(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(TASKS), default="cartpole")
    parser.add_argument("--backend", choices=["sync", "async"], default="sync")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--min-delay", type=float, default=0.0, help="seconds into training")
    parser.add_argument("--max-delay", type=float, default=6.0, help="seconds into training")
    parser.add_argument("--workdir", default=None, help="default: a temporary directory")
    parser.add_argument("--report", default=None, help="also write the Markdown report here")
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="fault-injection-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    config = [*TASKS[args.env], *COMMON, f"env.backend={args.backend}"]
    rng = random.Random(args.seed)
    code = snapshot(work)

    print(f"reference run ({args.env}, {args.backend}) ...", flush=True)
    reference = work / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    start = time.monotonic()
    proc = train(code, [*config, f"trainer.run_dir={reference}"], logs / "reference.log")
    if proc.wait() != 0:
        raise SystemExit(f"reference run failed, see {logs / 'reference.log'}")
    reference_seconds = time.monotonic() - start

    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    kills = resumes = verified = mid_write = 0
    problems: list[str] = []
    leftover_workers = 0
    last_step = -1
    rows = []
    attempt = 0
    proc = None
    try:
        while True:
            # Killed before it wrote config.yaml, a run does not exist yet: start it again.
            started_before = (run / "config.yaml").exists()
            cmd = ["--resume", str(run)] if started_before else [*config, f"trainer.run_dir={run}"]
            log = logs / f"attempt_{attempt}.log"
            before = set(temp_files(run))  # left by the previous kill, removed by the resume
            proc = train(code, cmd, log)
            resumes += started_before
            attempt += 1
            if kills >= args.kills:
                code = proc.wait()
                if code != 0:
                    problems.append(f"the final resume exited with {code} (see {log})")
                break
            # Kills cycle through three moments: during startup (before the trainer exists),
            # at a random point of training, and in the middle of a checkpoint write.
            kind = ("startup", "training", "checkpoint write")[kills % 3]
            started = time.monotonic()
            if kind == "startup":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=rng.uniform(0.1, 1.5))
            else:
                wait_for_start(proc, log)
                if kind == "training":
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=rng.uniform(args.min_delay, args.max_delay))
                else:
                    wait_for_write(proc, run, timeout=300.0)
            if proc.poll() is not None:  # finished (or failed) before the kill
                if proc.returncode != 0:
                    problems.append(f"a run exited with {proc.returncode} (see {log})")
                rows.append(("-", "the run finished before this kill", "-", "-"))
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            after = time.monotonic() - started
            kills += 1
            stale = [name for name in temp_files(run) if name not in before]
            mid_write += bool(stale)
            if args.backend == "async":
                time.sleep(1.0)  # workers notice their parent's death on their next pipe read
                alive = orphans(run)
                leftover_workers += len(alive)
                for pid in alive:  # do not let them disturb the next attempt
                    os.kill(pid, signal.SIGKILL)
            try:
                count, step = verify_checkpoints(run)
            except Exception as exc:  # any unloadable checkpoint is data lost
                problems.append(f"kill {kills}: a checkpoint does not load ({exc})")
                count, step = 0, None
            verified += count
            if step is not None and step < last_step:
                problems.append(
                    f"kill {kills}: latest.pt went back from step {last_step} to {step}"
                )
            if last_step >= 0 and step is None:
                problems.append(f"kill {kills}: latest.pt disappeared")
            last_step = step if step is not None else last_step
            shown = "none yet" if step is None else str(step)
            rows.append((str(kills), f"{kind} ({after:.1f} s)", shown, ", ".join(stale) or "-"))
            print(f"kill {kills}: {rows[-1][1]}; latest.pt at step {step}; "
                  f"temp files: {rows[-1][3]}", flush=True)  # fmt: skip
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()

    count, step = verify_checkpoints(run)
    verified += count
    final, expected = load_checkpoint(run), load_checkpoint(reference)
    diffs: list[str] = []
    for key in ("model", "optimizer", "reward_scaler", "rng", "global_step", "iteration", "envs"):
        tensors_equal(expected.get(key), final.get(key), key, diffs)
    if diffs:
        problems.append(f"final state differs from the uninterrupted run in {', '.join(diffs[:5])}")
    ref_metrics, run_metrics = metrics(reference), metrics(run)
    if ref_metrics != run_metrics:
        steps = [m["global_step"] for m in run_metrics]
        problems.append(
            f"metrics.jsonl differs from the uninterrupted run ({len(steps)} records, "
            f"{len(steps) - len(set(steps))} duplicated steps)"
        )
    if temp_files(run):
        problems.append(f"temp files left after the final resume: {temp_files(run)}")
    if leftover_workers:
        problems.append(f"{leftover_workers} env workers outlived their killed parent")

    command = "python scripts/fault_injection.py " + " ".join(sys.argv[1:])
    lines = [
        f"## Fault injection: {args.env}, {args.backend} envs",
        "",
        f"Command: `{command}`",
        "",
        f"Config: `{' '.join(config)}` (reference run: {reference_seconds:.0f} s, "
        f"{expected['global_step']:,} steps, {expected['iteration']} iterations, "
        f"{(reference / 'checkpoints' / 'latest.pt').stat().st_size / 1e6:.1f} MB per checkpoint)",
        "",
        "| kill | when (seconds after launch or after the trainer started) | latest.pt step after the kill | temp files left by the killed writer |",
        "| --- | --- | --- | --- |",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        f"- kills (SIGKILL): {kills}, of which {mid_write} landed in the middle of a checkpoint write",
        f"- resumes: {resumes}",
        f"- checkpoint loads verified: {verified} (every checkpoint file after every kill, and at the end)",
        f"- final state equal to the uninterrupted run, bit for bit: {'yes' if not diffs else 'NO'}",
        f"- metrics.jsonl equal to the uninterrupted run's, record for record: "
        f"{'yes' if ref_metrics == run_metrics else 'NO'}",
    ]
    if args.backend == "async":
        lines.append(f"- env workers left behind by killed runs: {leftover_workers}")
    lines.append(f"- data lost: {'none' if not problems else '; '.join(problems)}")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.report:
        Path(args.report).write_text(report)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
