"""Results files and the provenance of every record in them.

A benchmark keeps its measurements in a JSON file (in docs/bench for the published ones), written
whole or not at all. Every record a benchmark writes carries a `provenance` object that says
where its numbers come from:

    command   the command line that measured it (`python -m scripts.bench.<name> ...`)
    commit    the repository's commit (`git rev-parse HEAD`), and `dirty`: whether files of
              the code (embodied_ppo/, envs/, scripts/, configs/, pyproject.toml) differed
              from it, tracked ones changed or new ones git does not ignore
    date      when the record was written (UTC, ISO 8601)
    machine   CPU model, cores (and the cores this process may use), GPU model or null,
              Python, the operating system and the versions of torch, mujoco, gymnasium and
              Stable-Baselines3

Records written before provenance was captured carry one recovered from the repository's
history: `"recovered": true`, the commit and date of the commit that added the record, and
the machine as the page that published the numbers described it; what could not be recovered
is null (`check_provenance` accepts null only in a recovered record).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.bench.lib.args import BadInput

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "docs" / "bench"  # the published records
# What a measurement's numbers depend on: a change here without a commit makes the record dirty.
CODE = ("embodied_ppo", "envs", "scripts", "configs", "pyproject.toml")
PACKAGES = ("torch", "mujoco", "gymnasium", "stable-baselines3")
FIELDS = ("command", "commit", "date", "machine")
MACHINE_FIELDS = ("cpu", "cores", "gpu", "python", "torch")


def read_results(path: Path, records: str | None = None, name: str = "") -> dict:
    """A benchmark's results file (a JSON object), {} when there is none yet; with `records`,
    every value in it must be an object holding that key (one record per config or task).
    Anything else is refused (`BadInput`) before a run starts, the file untouched."""
    if not path.exists():
        return {}
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        results = exc
    if isinstance(results, dict) and records is not None:
        whole = all(isinstance(r, dict) and records in r for r in results.values())
        results = results if whole else None
    if not isinstance(results, dict):
        raise BadInput(f"{path} is not a results file of this {name or 'benchmark'}")
    return results


def write_results(path: Path, results: dict) -> None:
    """Write a results file whole or not at all: into a temporary file, then moved into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(path)


def _git(*args: str) -> str | None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run([git, *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def commit() -> tuple[str | None, bool | None]:
    """The repository's commit and whether its code differs from it: a changed tracked file
    or a new one git does not ignore, such as a config not yet committed (None, None outside
    git)."""
    head = _git("rev-parse", "HEAD")
    if head is None:
        return None, None
    changed = _git("status", "--porcelain", "--", *CODE)
    return head, bool(changed)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; what platform knows elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str | None:
    """The GPUs nvidia-smi names (several joined by ', '), None where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True)  # fmt: skip
    names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
    return ", ".join(names) if out.returncode == 0 and names else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """The machine a measurement ran on (no package is imported to learn it)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "gpu": gpu_model(),
        "python": platform.python_version(),
        "os": platform.platform(),
        **{p.replace("-", "_"): _version(p) for p in PACKAGES},
    }


def torch_machine() -> dict[str, Any]:
    """The machine as the side-by-side timings' records have always named it (torch imported:
    its default threads, and CUDA); their provenance names it in full."""
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
    }


def command(module: str, argv: Sequence[str]) -> str:
    """The command line that runs `module` with `argv`, as a user would type it."""
    return shlex.join(["python", "-m", module, *argv])


def provenance(module: str, argv: Sequence[str]) -> dict[str, Any]:
    """Where a record's numbers come from: the command, the commit, the date, the machine."""
    head, dirty = commit()
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "command": command(module, argv),
        "commit": head,
        "dirty": dirty,
        "date": now.isoformat(timespec="seconds"),
        "machine": machine(),
    }


def check_provenance(record: dict, where: str) -> list[str]:
    """What a record's provenance lacks (empty when whole): every field named, none null
    unless the provenance says it was recovered from the history."""
    prov = record.get("provenance")
    if not isinstance(prov, dict):
        return [f"{where}: no provenance"]
    recovered = prov.get("recovered") is True
    missing = [f for f in FIELDS if f not in prov or (prov[f] is None and not recovered)]
    mach = prov.get("machine")
    if isinstance(mach, dict):
        missing += [
            f"machine.{f}" for f in MACHINE_FIELDS
            if f not in mach or (mach[f] is None and not recovered and f != "gpu")
        ]  # fmt: skip
    elif "machine" not in missing:
        missing.append("machine")
    return [f"{where}: provenance lacks {', '.join(missing)}"] if missing else []
