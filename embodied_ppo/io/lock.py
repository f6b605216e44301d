"""One writer per run directory."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import TextIO

from embodied_ppo.core.errors import UserError

# ---------------------------------------------------------------------------------- run lock
LOCK_NAME = ".lock"


class RunLock:
    """One writer per run directory: an exclusive lock on RUN_DIR/.lock while a run trains.

    The operating system releases the lock when its holder exits, however it exits (kill -9
    included), so a lock left by a dead process is simply taken over; the file names the
    holder (pid, host, start time) for the refusal message. A holder that ends normally removes
    the file, so a finished run directory holds no trace of it, and a refused attempt leaves
    the directory exactly as it found it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._file: TextIO | None = None

    def acquire(self) -> RunLock:
        """Take the lock and write who holds it; a UserError naming the holder if another
        process has it."""
        import fcntl  # in the function: fcntl exists on POSIX systems only

        while True:
            f = open(self.path, "a+")  # noqa: SIM115 (held until release)
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                f.close()
                raise UserError(
                    f"{self.path.parent}: this run is being trained by {holder}; wait for it to "
                    "finish or stop it (Ctrl-C saves a checkpoint), then --resume"
                ) from None
            # A holder that released between our open and our flock has removed the file we
            # locked: lock the file that is at the path now, not an orphan.
            if self._is_at_path(f):
                break
            f.close()
        f.seek(0)
        f.truncate()
        f.write(
            f"process {os.getpid()} on {socket.gethostname()} "
            f"(since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
        )
        f.flush()
        self._file = f
        return self

    def _is_at_path(self, f: TextIO) -> bool:
        try:
            return os.path.samestat(os.fstat(f.fileno()), os.stat(self.path))
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file and let the lock go (nothing if it is not held)."""
        if self._file is not None:
            # Remove the file while still holding the lock, then close (which releases it).
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
