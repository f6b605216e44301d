"""scripts/bench/mjlab_probe.py's bad input, which it refuses before mjlab loads: one line, exit 2,
nothing written. (The probe itself runs in CI's mjlab environment: the relay-window test.)"""

from __future__ import annotations

import pytest
from bench_support import run_module


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["{a}", "{b}", "--json", "{out}"], "--json: got 1 files for 2 policies; give one each"),
        (["{a}", "{missing}"], "{missing}: no such ONNX file"),
        (["{a}"], "--task: {a} has no export JSON naming its task; give --task"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, line):
    paths = {k: tmp_path / f"{k}.onnx" for k in ("a", "b", "missing")}
    paths["out"] = tmp_path / "probe.json"
    paths["a"].write_bytes(b"")
    paths["b"].write_bytes(b"")
    done = run_module("scripts.bench.mjlab_probe", *(a.format(**paths) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"scripts.bench.mjlab_probe: error: {line.format(**paths)}"
    assert not paths["out"].exists()
