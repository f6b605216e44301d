"""Every entry point of scripts/bench (the benchmarks and their workers): run as
`python -m scripts.bench.<name>`, bad arguments refused in one line with exit status 2 before
anything runs, a results file it did not write refused and left as it was, and each benchmark
with one canonical command on docs/benchmarks.md that its parser takes."""

from __future__ import annotations

import importlib
import shlex

import pytest
from bench_support import run_module
from support import ROOT

from scripts.bench.report import running

BENCH = ROOT / "scripts" / "bench"


def entry_points(folder: str = "") -> list[str]:
    """The modules of scripts/bench (or of its `folder`) that a user or a benchmark runs."""
    root = BENCH / folder if folder else BENCH
    return sorted(
        f"scripts.bench.{folder + '.' if folder else ''}{p.stem}"
        for p in root.glob("*.py")
        if 'if __name__ == "__main__":' in p.read_text()
    )


BENCHMARKS = entry_points()
# pinned_cli hands its arguments to the package's command line (and pins its process to a core):
# run only as a process of its own.
WORKERS = [m for m in entry_points("workers") if not m.endswith(".pinned_cli")]


def test_the_room_has_its_benchmarks_and_workers():
    names = {m.rsplit(".", 1)[1] for m in BENCHMARKS}
    assert {"mujoco", "arm", "recurrent", "throughput", "whole_process", "update"} <= names
    assert {m.rsplit(".", 1)[1] for m in WORKERS} >= {"sb3_ppo", "sb3_zoo", "sb3_recurrent"}


@pytest.mark.parametrize("module", BENCHMARKS + WORKERS)
@pytest.mark.parametrize(
    "argv", [["--no-such-option"], ["--rounds", "many"]], ids=["option", "value"]
)
def test_bad_arguments_are_one_line_and_exit_2(module, argv, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"{module}: error: "), err


@pytest.mark.parametrize("module", BENCHMARKS + WORKERS)
def test_each_runs_as_a_module_from_the_repository_root(module):
    ran = run_module(module, "--help", timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"usage: {module}")


def test_the_pinned_command_line_is_the_packages_own():
    ran = run_module("scripts.bench.workers.pinned_cli", "train", "--no-such-option")
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1
    assert ran.stderr.startswith("embodied-ppo: error: ")


def test_every_benchmark_has_one_canonical_command_its_parser_takes():
    listed = [e.module for e in running.CATALOG]
    assert sorted(listed) == BENCHMARKS, "a benchmark without its row, or a row without one"
    for entry in running.CATALOG:
        argv = shlex.split(entry.command)
        assert argv[:3] == ["python", "-m", entry.module], entry.command
        importlib.import_module(entry.module).build_parser().parse_args(argv[3:])
        assert entry.writes and entry.takes


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"task": "cartpole"}'])
@pytest.mark.parametrize(
    "args",
    [
        ["scripts.bench.recurrent", "--task", "cartpole", "--out"],
        ["scripts.bench.recurrent", "--summarize"],
        ["scripts.bench.arm", "--tasks", "reach", "--root", "{tmp}", "--results"],
        ["scripts.bench.mujoco", "--report-only", "--results"],
    ],
)
def test_a_results_file_the_benchmark_did_not_write_is_refused_in_one_line(
    tmp_path, args, text, capsys
):
    """Nothing trains, no traceback, the file is left as it was."""
    out = tmp_path / "other.json"
    out.write_text(text)
    module, *rest = (a.replace("{tmp}", str(tmp_path / "runs")) for a in args)
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main([*rest, str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert "is not a results file of this" in err
    assert out.read_text() == text and not (tmp_path / "runs").exists()  # nothing lost
