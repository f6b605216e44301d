"""Which tests may skip, and why: a skip for any other reason fails a strict run.

A skipped test is a test that did not run; in CI that must be a known absence (no GPU on the
machine, mjlab tested in its own environment), never a broken import or a missing extra that
silently turns a suite green. With EMBODIED_PPO_STRICT_SKIPS=1 (set by .ci/run) the session
fails, after the usual report, when a test skipped for a reason that matches none of ALLOWED;
EMBODIED_PPO_REQUIRE names extras that must be present (e.g. `mjlab` in CI's mjlab
environment), whose absence is then never an allowed reason. Without the variable, skips are
listed (`-rs`) and nothing more: a developer's machine may lack an extra.
"""

from __future__ import annotations

import os
import re

import pytest

# reason pattern -> why such a skip is expected on CI's machines.
ALLOWED: dict[str, str] = {
    r"needs a CUDA device|needs CUDA|NCCL needs a GPU per process": "CI machines have no GPU",
    r"could not import 'mjlab'": "the mjlab tests run in CI's second environment",
}

# Extras whose "could not import" skips EMBODIED_PPO_REQUIRE can forbid.
EXTRA_MODULES = {"mjlab": "mjlab"}

_skipped: list[tuple[str, str]] = []


def allowed_patterns() -> list[str]:
    """The allowed reasons of this run: ALLOWED less the imports of required extras."""
    required = {e.strip() for e in os.environ.get("EMBODIED_PPO_REQUIRE", "").split(",") if e}
    forbidden = [f"could not import '{EXTRA_MODULES[e]}'" for e in required if e in EXTRA_MODULES]
    return [p for p in ALLOWED if not any(re.search(p, f) for f in forbidden)]


def unexpected(skips: list[tuple[str, str]], patterns: list[str]) -> list[tuple[str, str]]:
    """The (test, reason) pairs whose reason matches none of `patterns`."""
    return [(t, r) for t, r in skips if not any(re.search(p, r) for p in patterns)]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect every skip (in the controller under xdist, where the workers' reports arrive)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        _skipped.append((report.nodeid, str(report.longrepr[2]).removeprefix("Skipped: ")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a strict run whose skips are not all on the allow-list."""
    if os.environ.get("EMBODIED_PPO_STRICT_SKIPS") != "1" or hasattr(session.config, "workerinput"):
        return
    bad = unexpected(_skipped, allowed_patterns())
    if not bad:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.section("skips not on the allow-list (tests/skip_policy.py)", red=True)
        for nodeid, reason in bad:
            reporter.line(f"{nodeid}: {reason}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
