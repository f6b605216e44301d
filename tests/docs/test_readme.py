"""The README runs as written: its blocks marked `<!-- runnable -->` are executed in order, in one
scratch directory, with the budgets the marker shortens (`<!-- runnable: OLD => NEW; ... -->`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

MARKER = re.compile(
    r"<!-- runnable(?::(?P<subs>.*?))? -->\n```(?P<lang>\w+)\n(?P<code>.*?)\n```", re.S
)

pytestmark = pytest.mark.learning  # minutes, not seconds


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every marked block, with its substitutions applied."""
    blocks = []
    for m in MARKER.finditer(text):
        code = m.group("code")
        for sub in (m.group("subs") or "").split(";"):
            if "=>" in sub:
                old, new = (x.strip() for x in sub.split("=>"))
                assert old in code, f"the marker's {old!r} is not in its block"
                code = code.replace(old, new)
        blocks.append((m.group("lang"), code))
    return blocks


def test_the_marked_blocks_are_found():
    blocks = runnable_blocks((ROOT / "README.md").read_text())
    assert [lang for lang, _ in blocks].count("bash") >= 3
    assert any("embodied_ppo.train(" in code for lang, code in blocks if lang == "python")


def test_the_readme_runs_as_written(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONWARNINGS": "ignore",
    }
    for i, (lang, code) in enumerate(runnable_blocks((ROOT / "README.md").read_text())):
        if lang == "bash":
            cmd = ["bash", "-e", "-c", code]
        else:
            assert lang == "python", lang
            cmd = [sys.executable, "-c", code]
        out = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert out.returncode == 0, (
            f"block {i} ({lang}):\n{code}\n--- stderr:\n{out.stderr[-3000:]}"
        )
    assert (tmp_path / "cartpole.png").is_file() and (tmp_path / "curves.png").is_file()
    assert list((tmp_path / "runs" / "cartpole" / "videos").glob("*.mp4"))
    assert (tmp_path / "pendulum.onnx").is_file()
