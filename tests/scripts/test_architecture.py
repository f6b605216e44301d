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
