"""Hints that go all the way: eval, export and load_policy of a run whose latest checkpoint is
corrupt name the newest intact one and how to take it; the deployment example says what it
needs for --config; a task's progress line shows the metrics the task names (the quadruped's
tracking errors and falls); plot titles name what is drawn."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import toy_envs
from conftest import tiny_config
from support import ROOT

import embodied_ppo
from embodied_ppo.app.cli import main
from embodied_ppo.core.errors import CheckpointError


def quiet() -> dict:
    return {"progress": io.StringIO()}


@pytest.fixture(scope="module")
def damaged_run(tmp_path_factory):
    """A run of checkpoints at steps 32, 64 and 96 whose latest.pt (and ckpt_96.pt) are torn."""
    run = tmp_path_factory.mktemp("damaged") / "run"
    cfg = tiny_config(trainer={"total_steps": 96, "checkpoint_interval": 1})
    embodied_ppo.train(cfg, run_dir=run, **quiet())
    latest = run / "checkpoints" / "latest.pt"
    latest.unlink()  # (a hard link of ckpt_96.pt: damage it alone)
    (run / "checkpoints" / "ckpt_96.pt").write_bytes(b"torn")
    latest.write_bytes(b"torn")
    return run


@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_and_export_name_the_newest_intact_checkpoint_and_the_flag(
    damaged_run, command, capsys, tmp_path
):
    intact = damaged_run / "checkpoints" / "ckpt_64.pt"
    out = (
        ["--json", str(tmp_path / "e.json")]
        if command == "eval"
        else ["--out", str(tmp_path / "p.pt")]
    )
    with pytest.raises(SystemExit) as info:
        main([command, str(damaged_run), *out])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "latest.pt: not a readable checkpoint" in err
    assert f"the newest intact one is {intact}: `embodied-ppo {command} {intact}` takes it" in err
    assert "--use-intact" in err
    # What it names works: the flag, and the path.
    for args in ([str(damaged_run), "--use-intact"], [str(intact)]):
        with pytest.raises(SystemExit) as info:
            main([command, *args, *out])
        assert info.value.code == 0
    if command == "eval":
        assert json.loads((tmp_path / "e.json").read_text())["checkpoint"] == str(intact)
    else:
        assert json.loads((tmp_path / "p.pt.json").read_text())["global_step"] == 64
    capsys.readouterr()


def test_the_python_api_and_load_policy_name_it_too(damaged_run):
    intact = damaged_run / "checkpoints" / "ckpt_64.pt"
    with pytest.raises(CheckpointError, match="use_intact=True from Python"):
        embodied_ppo.evaluate(damaged_run, episodes=1)
    summary = embodied_ppo.evaluate(damaged_run, episodes=1, use_intact=True)
    assert summary["checkpoint"] == str(intact) and summary["global_step"] == 64
    assert embodied_ppo.export(damaged_run, use_intact=True).metadata["global_step"] == 64
    with pytest.raises(CheckpointError) as info:
        embodied_ppo.load_policy(damaged_run)
    assert str(info.value).endswith(f"the newest intact one is {intact}: load it by that path")
    policy = embodied_ppo.load_policy(intact)
    assert policy(np.zeros(4, dtype=np.float32)) in (0, 1)


def test_the_deployment_example_names_what_config_needs():
    """Without pyyaml, --config is one argparse error naming the package, not a traceback."""
    code = (
        "import sys, runpy\n"
        "sys.modules['yaml'] = None\n"  # as if pyyaml were not installed
        "sys.argv = ['quadruped.py', 'policy.onnx', '--config', 'config.yaml']\n"
        "runpy.run_path('examples/deploy/quadruped.py', run_name='__main__')\n"
    )
    pytest.importorskip("onnxruntime")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .endswith("error: --config reads a run's config.yaml with pyyaml: pip install pyyaml")
    )
    text = (ROOT / "examples/deploy/quadruped.py").read_text()
    assert "and pyyaml, to read a run's config with `--config`" in text
    for page in ("docs/legged.md", "docs/deployment.md"):
        assert "pyyaml" in (ROOT / page).read_text(), page


class FallingEnv(toy_envs.LogEnv):
    """LogEnv naming its fall rate and a metric it never reports for the progress line."""

    metadata = {
        "render_modes": [],
        "progress_metrics": {"metrics/fall_rate": "falls {:.0%}", "metrics/never": "never {}"},
    }


def test_a_task_names_the_metrics_its_progress_line_shows(tmp_path):
    env_id = "EmbodiedPPOTestFalling-v0"
    gym.register(env_id, entry_point=FallingEnv, max_episode_steps=5, kwargs={"fall_at": 3})
    stream = io.StringIO()
    try:
        embodied_ppo.train(tiny_config(env_id), run_dir=tmp_path / "run", progress=stream)
    finally:
        gym.registry.pop(env_id)
    last = stream.getvalue().strip().splitlines()[-1]
    # Every episode falls at step 3: the last 100 episodes' fall rate is 100%.
    assert " | return 3.0 | falls 100% | ETA " in last, last
    assert "never" not in last  # a metric no episode reported is left out
    # A task that names none shows what it showed before.
    stream = io.StringIO()
    embodied_ppo.train(tiny_config(), run_dir=tmp_path / "plain", progress=stream)
    assert " steps/s | return " in stream.getvalue() and " | ETA " in stream.getvalue()
    assert "falls" not in stream.getvalue()


def test_the_quadrupeds_progress_line_shows_its_tracking_errors_and_falls(tmp_path):
    from embodied_ppo_envs.quadruped import QuadrupedEnv

    shown = QuadrupedEnv.metadata["progress_metrics"]
    assert list(shown) == [
        "metrics/tracking_error_lin",
        "metrics/tracking_error_yaw",
        "metrics/fall_rate",
        "metrics/terrain_level",
    ]
    out = subprocess.run(
        [
            sys.executable, "-m", "embodied_ppo", "train", "configs/quadruped_flat.yaml",
            "env.num_envs=2", "env.processes=1", "env.max_episode_steps=8",
            "algorithm.rollout_steps=16", "algorithm.minibatch_size=32",
            "algorithm.update_epochs=1", "trainer.total_steps=64", "trainer.compile=false",
            "trainer.eval_interval=null", f"trainer.run_dir={tmp_path / 'run'}",
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    last = [line for line in out.stdout.splitlines() if line.startswith("step ")][-1]
    parts = last.split(" | ")
    assert parts[3].startswith("velocity error ") and parts[3].endswith(" m/s"), last
    assert parts[4].startswith("yaw rate error ") and parts[4].endswith(" rad/s"), last
    assert parts[5].startswith("falls ") and parts[5].endswith("%"), last
    assert "terrain level" not in last  # flat ground reports no level


def record_titles(monkeypatch) -> list[str]:
    import matplotlib.axes

    titles: list[str] = []
    original = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "set_title",
        lambda ax, text, *a, **k: titles.append(text) or original(ax, text, *a, **k),
    )
    return titles


def test_plot_titles_name_what_is_drawn(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    titles = record_titles(monkeypatch)
    for seed in (0, 1):
        embodied_ppo.train(
            tiny_config(trainer={"seed": seed}), run_dir=tmp_path / f"s{seed}", **quiet()
        )
    evaluated = tmp_path / "evaluated"
    embodied_ppo.train(
        tiny_config(trainer={"eval_interval": 2, "eval_episodes": 1}), run_dir=evaluated, **quiet()
    )
    embodied_ppo.plot([tmp_path / "s0"], out=tmp_path / "a.png")
    embodied_ppo.plot([tmp_path / "s0", tmp_path / "s1"], out=tmp_path / "b.png", smooth=3)
    embodied_ppo.plot([evaluated], out=tmp_path / "c.png")
    embodied_ppo.plot([tmp_path / "s0"], out=tmp_path / "d.png", title="Mine")
    assert titles == [
        "Episodic return: training episodes",
        "Episodic return: training episodes (moving average of 3 points); bands: +-1 std over "
        "seeds",
        "Episodic return: training episodes (solid), evaluations (dashed)",
        "Mine",
    ]
