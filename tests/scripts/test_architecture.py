"""The package's architecture holds: scripts/check_architecture.py finds no layer crossed
upwards, no import circle, no module over its size, no public function without a docstring."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
from support import ROOT


def load():
    spec = importlib.util.spec_from_file_location(
        "check_architecture", ROOT / "scripts" / "check_architecture.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_the_package_passes_its_architecture_check(capsys):
    assert load().main([]) == 0, capsys.readouterr().out


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A package of our own, checked the same way."""
    module = load()
    monkeypatch.setattr(module, "ROOT", tmp_path)

    def write(files: dict[str, str]) -> None:
        for name, text in files.items():
            path = tmp_path / "embodied_ppo" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))

    return module, write


def test_an_upward_import_is_found(tree, capsys):
    module, write = tree
    write({
        "__init__.py": "",
        "model/__init__.py": "",
        "model/net.py": "from embodied_ppo.runner.loop import run\n",
        "runner/__init__.py": "",
        "runner/loop.py": '"""Loop."""\n\ndef run() -> None:\n    """Run."""\n',
    })  # fmt: skip
    assert module.main([]) == 1
    assert "model may not import runner" in capsys.readouterr().out


def test_an_import_circle_is_found(tree, capsys):
    module, write = tree
    write({
        "__init__.py": "",
        "algo/__init__.py": "",
        "algo/a.py": "def f():\n    from embodied_ppo.algo.b import g\n",
        "algo/b.py": "from embodied_ppo.algo.a import f\n",
    })  # fmt: skip
    assert module.main([]) == 1
    assert "import circle: embodied_ppo.algo.a -> embodied_ppo.algo.b -> embodied_ppo.algo.a" in (
        capsys.readouterr().out
    )


def test_long_modules_and_missing_docstrings_are_found(tree, capsys):
    module, write = tree
    write({
        "__init__.py": "",
        "core/__init__.py": "",
        "core/big.py": "x = 1\n" * 401,
        "core/f.py": "def public(x):\n    y = x\n    return y\n",
    })  # fmt: skip
    assert module.main([]) == 1
    out = capsys.readouterr().out
    assert "embodied_ppo.core.big: 401 lines" in out and "public has no docstring" in out


@pytest.fixture
def repository(tmp_path, monkeypatch):
    """A repository of our own (the package, envs/ and scripts/), checked the same way."""
    module = load()
    monkeypatch.setattr(module, "ROOT", tmp_path)

    def write(files: dict[str, str]) -> None:
        base = {"embodied_ppo/__init__.py": "", "envs/__init__.py": "", "scripts/__init__.py": ""}
        for name, text in {**base, **files}.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))

    return module, write


def test_an_import_circle_among_the_benchmarks_is_found(repository, capsys):
    module, write = repository
    write({
        "scripts/bench/__init__.py": "",
        "scripts/bench/lib/__init__.py": "",
        "scripts/bench/lib/stats.py": "from scripts.bench.report import page\n",
        "scripts/bench/report/__init__.py": "",
        "scripts/bench/report/page.py": "def f():\n    from ..lib import stats\n",
    })  # fmt: skip
    assert module.main([]) == 1
    assert (
        "import circle: scripts.bench.lib.stats -> scripts.bench.report.page -> "
        "scripts.bench.lib.stats"
    ) in capsys.readouterr().out


def test_an_import_circle_of_programs_run_by_their_path_is_found(repository, capsys):
    """A program run by its path imports the modules beside it by their bare names."""
    module, write = repository
    write({
        "scripts/bench_mujoco.py": "import bench_arm\n",
        "scripts/bench_arm.py": "from bench_mujoco import cli\n",
    })  # fmt: skip
    assert module.main([]) == 1
    assert "import circle: scripts.bench_arm -> scripts.bench_mujoco -> scripts.bench_arm" in (
        capsys.readouterr().out
    )


def test_an_import_circle_across_the_package_its_tasks_and_its_programs_is_found(
    repository, capsys
):
    module, write = repository
    write({
        "embodied_ppo/core/__init__.py": "",
        "embodied_ppo/core/errors.py": '"""Errors."""\nimport embodied_ppo_envs.reach\n',
        "envs/reach.py": "from scripts import tool\n",
        "scripts/tool.py": "from embodied_ppo.core import errors\n",
    })  # fmt: skip
    assert module.main([]) == 1
    out = capsys.readouterr().out
    assert (
        "import circle: embodied_ppo.core.errors -> embodied_ppo_envs.reach -> scripts.tool -> "
        "embodied_ppo.core.errors"
    ) in out


def test_a_repository_without_circles_passes_and_the_tests_do_not_count(repository, capsys):
    module, write = repository
    write({
        "envs/reach.py": "import numpy\n",
        "scripts/bench/__init__.py": "",
        "scripts/bench/arm.py": "from scripts.bench import lib\nfrom embodied_ppo_envs import reach\n",
        "scripts/bench/lib.py": "import embodied_ppo\n",
        "tests/test_a.py": "from scripts.bench import arm\n",
        "scripts/tests_helper.py": "",
    })  # fmt: skip
    assert module.main([]) == 0, capsys.readouterr().out


def test_a_benchmark_file_over_the_limit_is_found_and_a_tool_is_not(repository, capsys):
    module, write = repository
    write({
        "scripts/bench/__init__.py": "",
        "scripts/bench/big.py": "x = 1\n" * 401,
        "scripts/bench/run.sh": "true\n" * 401,
        "scripts/bench/ok.py": "x = 1\n" * 400,
        "scripts/tool.py": "x = 1\n" * 900,  # a tool outside the benchmarks: not held to it
    })  # fmt: skip
    assert module.main([]) == 1
    out = capsys.readouterr().out
    assert "scripts/bench/big.py: 401 lines (at most 400)" in out
    assert "scripts/bench/run.sh: 401 lines (at most 400)" in out
    assert "ok.py" not in out and "tool.py" not in out


def test_a_function_taking_more_than_six_parameters_by_position_is_found(tree, capsys):
    module, write = tree
    write({
        "__init__.py": "",
        "algo/__init__.py": "",
        "algo/many.py": '''
            """Seven by position."""


            def seven(a, b, c, d, e, f, g):
                """Too many."""


            class Step:
                """A constructor: self does not count, keyword-only ones do not either."""

                def __init__(self, a, b, c, d, e, f, *args, g=0, h=0):
                    """Six by position."""

                def apply(self, a, b, c, d, e, f, g, /):
                    """Positional-only ones count."""
        ''',
    })  # fmt: skip
    assert module.main([]) == 1
    out = capsys.readouterr().out
    assert "embodied_ppo.algo.many:5: seven takes 7 parameters by position (at most 6" in out
    assert "embodied_ppo.algo.many:15: apply takes 7 parameters by position" in out
    assert "__init__" not in out


def test_the_tasks_are_held_to_the_size_and_parameter_limits(repository, capsys):
    module, write = repository
    write({
        "envs/big.py": "x = 1\n" * 401,
        "envs/arm.py": "class Arm:\n    def __init__(self, a, b, c, d, e, f, g=1):\n        pass\n",
        "envs/reach.py": "def make(a, b, c, d, e, f, *, g=1, h=2):\n    pass\n",
    })  # fmt: skip
    assert module.main([]) == 1
    out = capsys.readouterr().out
    assert "envs/big.py: 401 lines (at most 400)" in out
    assert "envs/arm.py:2: __init__ takes 7 parameters by position" in out
    assert "reach" not in out
