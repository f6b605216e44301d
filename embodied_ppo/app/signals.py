"""Graceful stop: SIGINT / SIGTERM finish the current iteration, save, and exit 130 / 143.

The training loop only reaches a state worth saving between iterations (the rollout buffer is
not checkpointed), so the first signal records a request that the loop honours at the next
iteration boundary: it writes a checkpoint and returns. A second signal raises
:class:`Interrupted` at once; checkpoints are written atomically, so stopping in the middle of a
write still leaves the previous one intact. The exception may reach the caller as another one
where it lands inside a library's own machinery (torch.compile's guard evaluation turns it
into a RuntimeError): `GracefulStop.interrupted` says that the stop was asked for all the same.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

# Started by torchrun (which forwards the stop signals it gets to its workers).
TORCHRUN = "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1


ECHO_SECONDS = 3.0


# A signal handler as signal.signal takes and returns it: a function, SIG_DFL / SIG_IGN, or
# None (a handler not installed from Python).
Handler = Callable[[int, FrameType | None], object] | int | None


class Interrupted(KeyboardInterrupt):
    """A second stop signal: leave now. `signum` gives the exit code 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The shell convention for a process stopped by a signal: 128 + its number."""
    return 128 + int(signum)


class GracefulStop:
    """Context manager that turns the first SIGINT / SIGTERM into a stop request.

    Use it as the loop's `should_stop` callable: it returns True once a signal arrived.
    Handlers are installed only in the main thread (Python delivers signals there) and the
    previous ones are restored on exit.
    """

    def __init__(self, signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.signums = signums
        self.signum: int | None = None
        self.interrupted: int | None = None  # the second signal, once it came
        self._at = 0.0
        self._previous: dict[int, Handler] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in self.signums:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __call__(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal that asked to stop (130 for SIGINT, 143 for SIGTERM)."""
        assert self.signum is not None
        return exit_code(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signum is not None:
            # Under torchrun a Ctrl-C arrives twice: from the terminal and forwarded by the
            # launcher. The same signal again within a moment is that echo, not a second one.
            if not (TORCHRUN and signum == self.signum and now - self._at < ECHO_SECONDS):
                self.interrupted = signum
                raise Interrupted(signum)
            return
        self.signum, self._at = signum, now
        if int(os.environ.get("RANK", "0")) != 0:
            return  # one message for the run: process 0's
        name = signal.Signals(signum).name
        # os.write, not print: the handler may run while the main thread is inside a write to
        # the same stream, and buffered streams refuse re-entrant writes.
        message = (
            f"\n{name} received: finishing this iteration, then saving a checkpoint "
            "(send it again to stop at once)\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, message.encode())
