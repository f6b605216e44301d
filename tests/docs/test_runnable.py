"""The documentation runs as written: each page's blocks marked `<!-- runnable -->` are executed
in order, in one scratch folder per page that holds the repository's configs/, scripts/ and
examples/, with the budgets their marks substitute (see doc_pages.py for the marks)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import PAGES, Block, blocks, rel
from support import ROOT

pytestmark = pytest.mark.learning  # a couple of minutes, not seconds

RUNNABLE = [p for p in PAGES if any(b.mark == "runnable" for b in blocks(p))]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        # The interpreter running the tests, and its `embodied-ppo`, come first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONWARNINGS": "ignore",
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
    }


def _one_core() -> None:
    """The blocks run on one core (the budget the doc tests keep to, on a machine others use):
    the package then sizes its threads for one core, as it would on such a machine. Each pytest
    worker (gw0, gw1, ...) takes its own core, so two pages run side by side, not on one core."""
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        os.sched_setaffinity(0, {cores[int(worker) % len(cores)] if worker.isdigit() else cores[0]})


class Session:
    """A reader's terminal: blocks run in one folder, and what a bash block exports (e.g.
    `export PYTHONPATH=.`) holds for the blocks after it."""

    def __init__(self, folder: Path, state: Path) -> None:
        self.folder, self.state, self.env = folder, state, _env()

    def run(self, block: Block) -> None:
        code = block.code_to_run()
        if block.file is not None:
            (self.folder / block.file).write_text(code + "\n")
            if block.lang not in ("bash", "python"):
                return  # a file later blocks use (a config)
            code = f"bash -e {block.file}" if block.lang == "bash" else f"python {block.file}"
            lang = "bash"
        else:
            lang = block.lang
        if lang == "bash":  # then keep the shell's environment for the next blocks
            script = f"{code}\nenv -0 > {shlex.quote(str(self.state))}"
            cmd = ["bash", "-e", "-c", script]
        else:
            cmd = [sys.executable, "-c", code]
        out = subprocess.run(
            cmd,
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=_one_core,
        )
        assert out.returncode == 0, (
            f"{block.where} ({block.lang}) exited {out.returncode}:\n{code}\n"
            f"--- stdout:\n{out.stdout[-2000:]}\n--- stderr:\n{out.stderr[-3000:]}"
        )
        if lang == "bash":
            pairs = self.state.read_bytes().split(b"\0")
            self.env = dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


# What the folder a page runs in holds of the repository, as a clone's root does.
LINKED = ("configs", "scripts", "examples")


def run_page(page: Path, folder: Path, state: Path) -> None:
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    session = Session(folder, state)
    for block in blocks(page):
        if block.mark == "runnable":
            session.run(block)


def test_the_pages_have_runnable_blocks():
    names = [rel(p) for p in RUNNABLE]
    for page in ("README.md", "docs/commands.md", "docs/deployment.md", "docs/environments.md"):
        assert page in names
    readme = [b for b in blocks(ROOT / "README.md") if b.mark == "runnable"]
    assert any("embodied_ppo.train(" in b.code for b in readme)


@pytest.mark.parametrize("page", RUNNABLE, ids=[rel(p) for p in RUNNABLE])
def test_the_page_runs_as_written(page, tmp_path):
    folder = tmp_path / "clone"
    folder.mkdir()
    run_page(page, folder, tmp_path / "environment")
    if page.name == "README.md":
        check_gitignore_covers(folder)


def check_gitignore_covers(tmp_path: Path) -> None:
    """Run in a clone's root, the README's commands leave nothing for `git status` to show."""
    written = sorted(
        p.name + ("/" if p.is_dir() else "") for p in tmp_path.iterdir() if p.name not in LINKED
    )
    assert written, "the README's blocks wrote nothing"
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return  # git reads .gitignore; without it there is nothing to compare with
    ignored = subprocess.run(
        [git, "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert sorted(ignored) == written, f"not in .gitignore: {set(written) - set(ignored)}"
