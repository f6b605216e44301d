"""Learning-curve plots from run directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from embodied_ppo.app.cli import main
from embodied_ppo.app.plot import group_runs, mean_band, plot_runs, read_run
from embodied_ppo.core.errors import UserError


def make_run(
    root: Path,
    name: str,
    seed: int,
    lr: float,
    points: list[tuple[int, float | None, float | None]],
) -> Path:
    """A run directory with a config.yaml and metrics.jsonl (train, eval returns per step)."""
    run = root / name
    run.mkdir()
    config = {
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "optim": {"lr": lr},
        "trainer": {"seed": seed, "run_dir": str(run), "device": "cpu"},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with open(run / "metrics.jsonl", "w") as f:
        for i, (step, train, ev) in enumerate(points):
            record: dict = {"global_step": step, "iteration": i + 1, "time": 0.1 * i}
            if train is not None:
                record["charts/episodic_return"] = train
            if ev is not None:
                record["eval/episodic_return"] = ev
            f.write(json.dumps(record) + "\n")
    return run


@pytest.fixture
def runs(tmp_path):
    a0 = make_run(
        tmp_path,
        "a-seed0",
        0,
        1e-3,
        [(100, 1.0, None), (200, 3.0, 10.0), (300, 5.0, None), (400, 7.0, 20.0)],
    )
    a1 = make_run(
        tmp_path, "a-seed1", 1, 1e-3, [(100, 3.0, None), (200, 5.0, 14.0), (300, 7.0, None)]
    )
    b0 = make_run(tmp_path, "b-seed0", 0, 3e-4, [(100, 0.0, 1.0), (200, 0.5, 2.0)])
    return a0, a1, b0


def test_runs_that_differ_only_in_seed_are_one_experiment(runs):
    a0, a1, b0 = (read_run(r) for r in runs)
    groups = group_runs([a0, b0, a1])
    assert [[r.path.name for r in g] for g in groups] == [["a-seed0", "a-seed1"], ["b-seed0"]]


def test_mean_band_over_the_common_steps(runs):
    a0, a1, _ = (read_run(r) for r in runs)
    steps, mean, std = mean_band(
        [a0.curves["charts/episodic_return"], a1.curves["charts/episodic_return"]]
    )
    # Common range 100..300 (seed 1 stopped at 300): per step the values are (1, 3), (3, 5), (5, 7).
    assert steps.tolist() == [100, 200, 300]
    np.testing.assert_allclose(mean, [2.0, 4.0, 6.0])
    np.testing.assert_allclose(std, [1.0, 1.0, 1.0])
    # Eval points at different steps are interpolated before averaging: a1 has only one (200).
    steps, mean, _ = mean_band(
        [a0.curves["eval/episodic_return"], a1.curves["eval/episodic_return"]]
    )
    assert steps.tolist() == [200] and mean.tolist() == [12.0]


def test_torn_lines_and_repeated_steps(tmp_path):
    run = make_run(tmp_path, "r", 0, 1e-3, [(100, 1.0, None), (200, 2.0, None), (200, 9.0, None)])
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"global_step": 300, "charts/episodic_ret')  # killed mid-write
    steps, values = read_run(run).curves["charts/episodic_return"]
    assert steps.tolist() == [100, 200] and values.tolist() == [
        1.0,
        9.0,
    ]  # a resumed run's later record wins


def test_plot_writes_a_png(runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "figs" / "curves.png"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", *map(str, runs), "--out", str(out), "--smooth", "2"])
    assert exit_info.value.code == 0
    assert f"wrote {out}" in capsys.readouterr().out
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import imageio.v3 as iio

    image = iio.imread(out)
    assert image.shape[0] >= 300 and image.shape[1] >= 500
    assert image[..., :3].std() > 10  # something was drawn


def test_plot_errors(tmp_path, runs, monkeypatch):
    with pytest.raises(UserError, match="no metrics.jsonl"):
        plot_runs([str(tmp_path)], tmp_path / "x.png")
    with pytest.raises(UserError, match="not a run directory"):
        plot_runs([str(tmp_path / "missing")], tmp_path / "x.png")
    empty = make_run(tmp_path, "empty", 0, 1e-3, [(100, None, None)])
    with pytest.raises(UserError, match="no episodic returns"):
        plot_runs([str(empty)], tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"pip install 'embodied-ppo\[plot\]'"):
        plot_runs([str(runs[0])], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_seeds_are_counted_by_their_values(tmp_path, runs):
    from embodied_ppo.app.plot import _labels

    a0, a1, b0 = (read_run(r) for r in runs)
    again = read_run(make_run(tmp_path, "a-seed0-again", 0, 1e-3, [(100, 2.0, None)]))
    labels = _labels(group_runs([a0, a1, again, b0]))
    assert labels[0].endswith("(3 runs, 2 seeds)") and labels[1].endswith("(b-seed0)")
    assert _labels(group_runs([a0, a1]))[0].endswith("(2 seeds)")


def test_a_single_evaluation_is_drawn_as_a_marker(tmp_path, monkeypatch):
    import matplotlib.axes

    run = make_run(tmp_path, "one-eval", 0, 1e-3, [(100, 1.0, None), (200, 2.0, 7.0)])
    drawn = []
    original = matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((len(args[0]), kwargs.get("marker"), kwargs.get("label")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    plot_runs([str(run)], tmp_path / "c.png")
    eval_line = next(d for d in drawn if d[2].endswith("eval"))
    assert eval_line[:2] == (1, "o")  # one point: visible as a marker
