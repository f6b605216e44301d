"""The command line: user errors are one line, a non-zero exit, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import TINY
from support import ROOT

from embodied_ppo.io.checkpoint import load_checkpoint


def cli(*args, cwd=None):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "embodied_ppo", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
        timeout=300,
    )


def assert_user_error(proc, fragment):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("embodied-ppo: error:")
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_train_then_resume(tmp_path):
    run = tmp_path / "run"
    proc = cli("train", "configs/cartpole.yaml", *TINY, f"trainer.run_dir={run}")
    assert proc.returncode == 0, proc.stderr
    assert "done: 64 steps" in proc.stdout
    assert (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert load_checkpoint(run)["global_step"] == 64
    proc = cli("train", "--resume", run, "trainer.total_steps=128")
    assert proc.returncode == 0, proc.stderr
    assert "resuming" in proc.stdout and load_checkpoint(run)["global_step"] == 128
    assert "total_steps: 128" in (run / "config.yaml").read_text()
    # An algorithm change is refused on resume.
    assert_user_error(
        cli("train", "--resume", run, "algorithm.gamma=0.5"),
        "algorithm.gamma: cannot change when resuming",
    )


def test_the_train_command_leaves_its_heap_to_the_system_at_exit(tmp_path):
    # The interpreter's last collection would walk every object of the compiler (~1 s).
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
        "from embodied_ppo.app.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    args = ["train", "configs/cartpole.yaml", *TINY, f"trainer.run_dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("frozen at exit: True"), proc.stdout
    assert load_checkpoint(tmp_path / "run")["global_step"] > 0


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["configs/cartpole.yaml", "algorithm.clip_ratio_hihg=0.3"],
            "did you mean 'clip_ratio_high'",
        ),
        (["configs/cartpole.yaml", "env.id=CartPole-v9"], "did you mean 'CartPole-v1'"),
        (
            ["configs/cartpole.yaml", "trainer.seed=abc"],
            "trainer.seed: got 'abc', expected an integer",
        ),
        (["configs/nope.yaml"], "not found"),
        (["configs/cartpole.yaml", "trainer.seed"], "expected KEY.PATH=VALUE"),
        (["configs/pendulum.yaml", "model.head=categorical"], "model.head: got 'categorical'"),
    ],
)
def test_config_errors_write_nothing(tmp_path, args, fragment):
    run = tmp_path / "run"
    proc = cli("train", *args, f"trainer.run_dir={run}")
    assert_user_error(proc, fragment)
    assert not run.exists()


def test_existing_run_dir_is_never_overwritten(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "precious.txt").write_text("keep")
    assert_user_error(
        cli("train", "configs/cartpole.yaml", f"trainer.run_dir={run}"), "already exists"
    )
    assert (run / "precious.txt").read_text() == "keep" and len(list(run.iterdir())) == 1


def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_user_error(
        cli("train", "configs/cartpole.yaml", f"trainer.run_dir={blocker}/run"),
        "trainer.run_dir: cannot create",
    )


def test_resume_errors(tmp_path):
    assert_user_error(cli("train", "--resume", tmp_path), "not a run directory")
    assert_user_error(cli("train"), "give a config file")
    assert_user_error(cli("frobnicate"), "invalid choice")


def test_yaml_syntax_error_names_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: CartPole-v1\n  num_envs: [2\n")
    assert_user_error(cli("train", bad), "line")


def test_a_run_dir_that_is_a_file_is_named_as_one(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    out = cli("train", "configs/cartpole.yaml", *TINY, f"trainer.run_dir={target}")
    assert out.returncode == 2
    assert "is a file, not a directory; choose a new or empty directory" in out.stderr
    assert "--resume" not in out.stderr and target.read_text() == "mine\n"


def test_the_first_update_says_it_compiles(tmp_path):
    args = [a for a in TINY if a != "trainer.compile=false"]
    out = cli("train", "configs/cartpole.yaml", *args, f"trainer.run_dir={tmp_path / 'r'}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("compiling the update:") == 1


class _Exited(Exception):
    pass


def test_a_config_error_is_reported_before_torch_loads(tmp_path):
    # The command checks a new run's config first: the error line comes without torch's
    # import (most of a second), and nothing is written.
    code = (
        "import sys\n"
        "from embodied_ppo.app.cli import main\n"
        "try:\n"
        f"    main(['train', {str(ROOT / 'configs' / 'cartpole.yaml')!r}, "
        f"'algorithm.clip_ratio_hig=0.2', 'trainer.run_dir={tmp_path / 'run'}'])\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert done.stderr.strip() == (
        "embodied-ppo: error: algorithm.clip_ratio_hig: unknown key; did you mean "
        "'clip_ratio_high'?"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("in_group", "status"), [(True, 0), (True, 3), (False, 0)])
def test_a_process_that_left_a_process_group_exits_without_finalizing(
    monkeypatch, capsys, in_group, status
):
    # Python's finalization after a distributed run could abort in torch's C++ teardown: a
    # process that left a group ends through os._exit with its status, output flushed first.
    from embodied_ppo.app import cli

    exits = []

    def fake_exit(code):
        exits.append(code)
        raise _Exited

    def fake_plot(args):
        print("plotted")
        return status

    from embodied_ppo.runner import distributed

    monkeypatch.setattr(distributed, "shutdown", lambda: in_group)
    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    monkeypatch.setattr(cli, "cmd_plot", fake_plot)
    with pytest.raises(_Exited if in_group else SystemExit) as info:
        cli.main(["plot", "some_run"])
    assert capsys.readouterr().out == "plotted\n"
    if in_group:
        assert exits == [status]
    else:
        assert exits == [] and info.value.code == status
