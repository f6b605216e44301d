"""Training longer: `train --resume RUN --more STEPS` and `embodied_ppo.train(resume=...,
more_steps=...)`, and what a linear learning-rate schedule does when the budget grows
(optim.schedule_extension)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from conftest import tiny_config

import embodied_ppo
from embodied_ppo.app.cli import main

LR = 0.003
BATCH = 32  # 2 envs x 16 steps: the steps of one iteration


def quiet() -> dict:
    return {"progress": io.StringIO()}


def rates(run_dir: Path) -> dict[int, float]:
    """The learning rate each iteration trained with, by the global step it started at."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["global_step"] - BATCH: r["charts/learning_rate"] for r in rows}


def linear_run(run_dir: Path, total: int, **optim) -> None:
    cfg = tiny_config(
        optim={"lr": LR, "schedule": "linear", **optim}, trainer={"total_steps": total}
    )
    embodied_ppo.train(cfg, run_dir=run_dir, **quiet())


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # A run planned for 192 steps: the rate rises from LR / 3 to LR / 2 at the resume.
        ("rescale", [LR * (1 - s / 192) for s in (96, 128, 160)]),
        # From the last update's rate, LR / 3, down to 0 at 192.
        ("continue", [LR / 3 * (192 - s) / (192 - 96) for s in (96, 128, 160)]),
        # The last update's rate, held.
        ("keep", [LR / 3] * 3),
    ],
)
def test_more_steps_train_past_the_checkpoint_with_the_schedule_the_setting_names(
    tmp_path, mode, expected
):
    run = tmp_path / "run"
    linear_run(run, 96, schedule_extension=mode)
    assert [rates(run)[s] for s in (0, 32, 64)] == pytest.approx([LR, LR * 2 / 3, LR / 3])

    result = embodied_ppo.train(resume=run, more_steps=96, **quiet())
    assert result.global_step == 192
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["total_steps"] == 192
    assert [rates(run)[s] for s in (96, 128, 160)] == pytest.approx(expected, rel=1e-6)


def test_the_extended_schedule_survives_a_later_resume(tmp_path):
    """A run stopped after its budget grew resumes on the same schedule: the extension is
    part of the run's state, not only of the resume that made it."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for run in (whole, cut):
        linear_run(run, 96, schedule_extension="continue")
    embodied_ppo.train(resume=whole, more_steps=128, **quiet())

    def stop_after_one(run, metrics):
        return True

    stopped = embodied_ppo.train(resume=cut, more_steps=128, callbacks=[stop_after_one], **quiet())
    assert stopped.stopped and stopped.global_step == 128
    embodied_ppo.train(resume=cut, **quiet())  # the total stays 224: no new extension
    assert rates(cut) == rates(whole)
    assert rates(whole)[96] == pytest.approx(LR / 3)  # where the first budget left it


def test_the_command_trains_longer_and_refuses_what_does_not_fit(tmp_path, capsys):
    run = tmp_path / "run"
    linear_run(run, 64)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--resume", str(run), "--more", "64", "trainer.compile=false"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "to 128 steps" in out
    assert max(rates(run)) == 96 and len(rates(run)) == 4  # two iterations more
    # By default the rate goes on from the last update's, LR / 2, down to 0 at 128: no jump.
    assert [rates(run)[s] for s in (32, 64, 96)] == pytest.approx([LR / 2, LR / 2, LR / 4])

    # Done: the command says how to go on.
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--resume", str(run)])
    assert exit_info.value.code == 0
    assert f"embodied-ppo train --resume {run} --more STEPS" in capsys.readouterr().out

    for args, fragment in [
        (["--more", "64"], "--more goes with --resume"),
        (["--resume", str(run), "--more", "0"], "--more: got 0, expected an integer >= 1"),
        (
            ["--resume", str(run), "--more", "64", "trainer.total_steps=500"],
            "--more: cannot be given with trainer.total_steps",
        ),
    ]:
        argv = ["train", *args] if args[0] != "--more" else ["train", "configs/x.yaml", *args]
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("embodied-ppo: error: ") and fragment in err and err.count("\n") == 1
    assert max(rates(run)) == 96  # nothing trained
