"""scripts/gait_symmetry.py: the swings it measures in a contact sequence, a run's gait and its
record, and bad input."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import yaml
from support import ROOT

import embodied_ppo
from scripts.gait_symmetry import main, swings


def test_swings_are_the_runs_off_the_ground_between_two_contacts():
    contacts = np.array(
        [
            # FR: a swing of 2 steps, then one of 1; FL: lifted at the start (cut), one of 3;
            # RR: never lifted; RL: lifted at the end (cut).
            [1, 0, 1, 1],
            [0, 0, 1, 1],
            [0, 1, 1, 1],
            [1, 0, 1, 1],
            [0, 0, 1, 0],
            [1, 0, 1, 0],
            [1, 1, 1, 0],
        ]
    )
    assert swings(contacts, 0.02) == [pytest.approx([0.04, 0.02]), pytest.approx([0.06]), [], []]


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("scripts.gait_symmetry: error: ") and "not a run directory" in err


def test_a_runs_gait_is_measured_and_written_with_its_provenance(tmp_path, capsys):
    """A (tiny) quadruped run's gait over 2 episodes: every foot's duty factor a share of its
    steps, the asymmetries the mean differences of the mirrored legs' numbers, and `--out`
    holds what was printed, with the command that measured it."""
    config = yaml.safe_load((ROOT / "configs" / "quadruped_flat.yaml").read_text())
    config["env"].update(num_envs=2, processes=1, max_episode_steps=40)
    config["model"]["hidden_sizes"] = [16]
    config["algorithm"].update(rollout_steps=8, minibatch_size=16)
    config["trainer"].update(total_steps=32, eval_interval=None, compile=False, device="cpu")
    run = tmp_path / "run"
    embodied_ppo.train(config, run_dir=run, progress=io.StringIO())
    out = tmp_path / "gait.json"
    assert main([str(run), "--episodes", "2", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    g = record["runs"][str(run)]
    assert g["episodes"] == 2 and set(g["duty_factor"]) == {"FR", "FL", "RR", "RL"}
    duty = [g["duty_factor"][f] for f in ("FR", "FL", "RR", "RL")]
    assert all(0.0 <= d <= 1.0 for d in duty)
    assert g["duty_asymmetry"] == pytest.approx(
        (abs(duty[0] - duty[1]) + abs(duty[2] - duty[3])) / 2
    )
    assert record["provenance"]["command"].startswith("python -m scripts.gait_symmetry")
    assert f"duty factor {g['duty_asymmetry']:.3f}" in capsys.readouterr().out
