"""The progress line: its ETA, and the line it leaves for what follows."""

from __future__ import annotations

import io

from embodied_ppo.io.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_eta_uses_the_rate_given_for_it_and_shows_unknown_before_one():
    out = io.StringIO()
    progress = Progress(1000, out, period=0.0)
    progress.update(100, sps=50.0, mean_return=None, eta_sps=0.0)  # not measured yet
    progress.update(200, sps=50.0, mean_return=1.5, eta_sps=100.0)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("ETA ?")
    assert "50 steps/s" in lines[1] and lines[1].endswith("ETA 0m08s")  # 800 steps at 100/s


def test_closing_ends_an_open_terminal_line_so_what_follows_starts_its_own():
    out = Terminal()
    progress = Progress(1000, out)
    progress.update(100, sps=50.0, mean_return=None)
    assert not out.getvalue().endswith("\n")  # a live line on a terminal
    progress.close()
    assert out.getvalue().endswith("\n")
    progress.close()  # nothing more
    assert out.getvalue().count("\n") == 1
