"""The skip allow-list: what a strict CI run accepts and refuses."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from skip_policy import allowed_patterns, unexpected
from support import ROOT


def test_only_known_absences_are_allowed(monkeypatch):
    skips = [
        ("a", "needs a CUDA device"),
        ("b", "could not import 'mjlab': No module named 'mjlab'"),
        ("c", "could not import 'rliable': No module named 'rliable'"),
        ("d", "no EGL or OSMesa renderer on this machine"),
    ]
    monkeypatch.delenv("EMBODIED_PPO_REQUIRE", raising=False)
    assert [t for t, _ in unexpected(skips, allowed_patterns())] == ["c", "d"]
    monkeypatch.setenv("EMBODIED_PPO_REQUIRE", "mjlab")  # CI's mjlab environment
    assert [t for t, _ in unexpected(skips, allowed_patterns())] == ["b", "c", "d"]


def test_a_strict_run_fails_on_a_skip_off_the_list_and_names_it(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from skip_policy import pytest_runtest_logreport, pytest_sessionfinish\n"
    )
    (tests / "test_some.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_runs():
                pass

            def test_gpu():
                pytest.skip("needs a CUDA device")

            def test_missing():
                pytest.importorskip("a_module_that_is_not_there")
            """
        )
    )

    def run(strict: str, *select: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "EMBODIED_PPO_STRICT_SKIPS": strict}
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist"]
        cmd += ["-q", "-rs", "-o", "addopts=", str(tests / "test_some.py"), *select]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)

    strict = run("1")
    assert strict.returncode == 1, strict.stdout
    assert "test_some.py::test_missing: could not import 'a_module_that_is_not_there'" in (
        strict.stdout
    )
    assert "test_gpu" not in strict.stdout.split("allow-list")[-1]
    assert run("0").returncode == 0  # a developer's run lists the skips and passes
    assert run("1", "-k", "runs or gpu").returncode == 0  # only allowed skips
