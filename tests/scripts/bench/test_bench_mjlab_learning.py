"""scripts/bench/mjlab_learning.py: our metrics.jsonl and rsl_rl's TensorBoard events, side by side."""

from __future__ import annotations

import json

import pytest

from scripts.bench import mjlab_learning

TRACK = "Episode_Reward/track_linear_velocity"


def write_out_dir(tmp_path, iterations: int = 8, envs: int = 2):
    ours = tmp_path / "ours"
    ours.mkdir(parents=True)
    rows = [
        {"global_step": i * 24 * envs, "iteration": i, "time": 1.5 * i, TRACK: 0.1 * i,
         "charts/episodic_length": 100.0 + i}
        for i in range(1, iterations + 1)
    ]  # fmt: skip
    (ours / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "rsl_rl"))
    for it in range(iterations):  # rsl_rl counts iterations from 0
        writer.add_scalar("Perf/collection_time", 1.0, it)
        writer.add_scalar("Perf/learning_time", 0.25, it)
        writer.add_scalar(TRACK, 0.05 * (it + 1), it)
        if it >= 2:  # no episode had ended before
            writer.add_scalar("Train/mean_episode_length", 50.0 + it, it)
    writer.close()
    (tmp_path / "ours.wall_s").write_text("42\n")


def table_rows(text: str) -> dict[tuple[str, str], list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 4 and cells[1].isdigit():
            rows[cells[0], cells[1]] = cells
    return rows


def test_both_runs_are_read_at_the_same_iterations(tmp_path, capsys):
    write_out_dir(tmp_path)
    assert mjlab_learning.main([str(tmp_path), "--envs", "2"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    # Iterations 2, 4, 6 and 8 for both runs; steps = iteration x 24 x envs.
    assert sorted(rows) == sorted(
        (n, str(i)) for n in ("embodied-ppo", "rsl_rl") for i in (2, 4, 6, 8)
    )
    head = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    track, length, loop = head.index("track_lin (of 2)"), head.index("ep length"), 3
    ours8, rsl8 = rows["embodied-ppo", "8"], rows["rsl_rl", "8"]
    assert ours8[2] == rsl8[2] == "0.0M" and float(ours8[track]) == pytest.approx(0.8)
    # rsl_rl's loop time adds up collection and learning: 8 x 1.25 s; its iteration 7 is ours 8.
    assert float(rsl8[loop]) == 10 and float(rsl8[track]) == pytest.approx(0.4)
    assert float(rsl8[length]) == 57 and rows["rsl_rl", "2"][length] == "-"
    assert float(ours8[loop]) == 12
    assert "embodied-ppo: 1.500 s an iteration over iterations 5-8" in out
    assert "rsl_rl: 1.250 s an iteration over iterations 5-8" in out
    assert "embodied-ppo: process wall time 42 s" in out


def test_the_plot_is_written(tmp_path, capsys):
    write_out_dir(tmp_path)
    png = tmp_path / "curves.png"
    assert mjlab_learning.main([str(tmp_path), "--envs", "2", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_run_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        mjlab_learning.main([str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err
    assert (
        err.startswith("scripts.bench.mjlab_learning: error: ") and "metrics.jsonl not found" in err
    )
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "metrics.jsonl").write_text(json.dumps(
        {"global_step": 48, "iteration": 1, "time": 1.0}) + "\n")  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        mjlab_learning.main([str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err and "no TensorBoard events" in err
