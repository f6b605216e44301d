"""The progress line of a training, and the lines it prints between."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO


class Progress:
    """A live one-line progress display on a terminal; plain periodic lines otherwise."""

    def __init__(
        self, total_steps: int, stream: TextIO | None = None, period: float = 10.0
    ) -> None:
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.period = total_steps, period
        self.last_print = -math.inf
        self.open_line = False  # a terminal's progress line waits for its newline

    def update(
        self,
        step: int,
        sps: float,
        mean_return: float | None,
        final: bool = False,
        eta_sps: float | None = None,
        shown: Sequence[str] = (),
    ) -> None:
        """Show the run at `step` (steps per second, mean return of recent episodes, and the
        task's own metrics, `shown` as formatted by `metric_texts`); the ETA comes from
        `eta_sps` where given (a rate that leaves out one-off costs such as compiling the
        update), else from `sps`."""
        now = time.monotonic()
        if not self.tty and not final and now - self.last_print < self.period:
            return
        self.last_print = now
        rate = sps if eta_sps is None else eta_sps
        eta = (self.total - step) / rate if rate > 0 else math.inf
        ret = "n/a" if mean_return is None else f"{mean_return:.1f}"
        line = (
            f"step {step:,}/{self.total:,} ({100.0 * min(step, self.total) / self.total:5.1f}%) | "
            f"{sps:,.0f} steps/s | return {ret} | "
            + "".join(f"{text} | " for text in shown)
            + f"ETA {_duration(eta)}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
            self.open_line = not final
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the progress line, so that what is printed next starts on a line of its own."""
        if self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False

    def note(self, text: str) -> None:
        """A line of its own (on a terminal, in place of the progress line, which follows)."""
        self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.stream.flush()


def metric_texts(formats: Mapping[str, str], logs: Iterable[Mapping[str, float]]) -> list[str]:
    """The task's metrics as its progress line shows them: for each key of `formats` (an
    info["log"] key, e.g. "metrics/fall_rate"), its mean over the episodes' `logs` that hold it,
    put in its format string ("falls {:.0%}" -> "falls 12%")."""
    values: dict[str, list[float]] = {}
    for log in logs:
        for key, value in log.items():
            values.setdefault(key, []).append(float(value))
    texts = []
    for key, fmt in formats.items():
        if values.get(key):
            mean = math.fsum(values[key]) / len(values[key])
            try:
                texts.append(fmt.format(mean))
            except (ValueError, IndexError, KeyError):  # a format the value does not fit
                texts.append(f"{key} {mean:.3g}")
    return texts


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def eval_line(global_step: int, scalars: dict[str, float]) -> str:
    """The line an evaluation during training prints."""
    line = (
        f"eval at step {global_step:,}: return {scalars['eval/episodic_return']:.1f} "
        f"+- {scalars['eval/episodic_return_std']:.1f}"
    )
    if "eval/success_rate" in scalars:
        line += f", success {scalars['eval/success_rate']:.0%}"
    return line + f" (best {scalars['eval/best_return']:.1f})"
