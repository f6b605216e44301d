"""Child processes of the benchmarks: the package's command line, the workers, other checkouts.

A contender is measured in a fresh process: `python -m embodied_ppo ...` for our command line,
`python -m scripts.bench.workers.<name> ...` for a worker, which prints its measurement as a JSON
object on its last line of output. A worker that must import the package of another checkout
(a before/after comparison) runs with that checkout first on PYTHONPATH from a folder that
holds only this checkout's `scripts` (`outside_checkouts`): the package then comes from the
other checkout, the worker's code from this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def cli(args: Sequence[str]) -> None:
    """Run `embodied-ppo ARGS` in a fresh process from the repository's root; its output is
    dropped, a failure raises CalledProcessError."""
    subprocess.run([sys.executable, "-m", "embodied_ppo", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def worker_command(name: str, *args: str) -> list[str]:
    """The command that runs the worker `scripts.bench.workers.<name>` with `args`."""
    return [sys.executable, "-m", f"scripts.bench.workers.{name}", *args]


def last_json(stdout: str) -> dict:
    """The JSON object a worker printed on its last line."""
    return json.loads(stdout.strip().splitlines()[-1])


def run_worker(label: str, cmd: Sequence[str], cwd: Path = ROOT, env: dict | None = None) -> dict:
    """Run a worker's command and return its JSON; a failure stops the benchmark with the
    worker's error output (exit status 1)."""
    out = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, env=env)
    if out.returncode != 0:
        sys.exit(f"{label} failed:\n{out.stderr}")
    return last_json(out.stdout)


def checkout_env(src: Path) -> dict[str, str]:
    """This process's environment with the checkout `src` first on PYTHONPATH (what the caller
    had there stays after it: packages a machine carries there, as a GPU machine without a
    package registry does)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


@contextlib.contextmanager
def outside_checkouts() -> Iterator[Path]:
    """A temporary folder that holds only a link to this checkout's `scripts`: run from there,
    PYTHONPATH alone decides which checkout's package a worker imports."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "scripts").symlink_to(ROOT / "scripts", target_is_directory=True)
        yield Path(tmp)
