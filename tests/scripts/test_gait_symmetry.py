"""scripts/gait_symmetry.py: the swings it measures in a contact sequence, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

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
