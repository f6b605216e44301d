"""Text helpers for one-line messages."""

from __future__ import annotations

import io


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (at most `limit` characters), or its type's
    name when it has none: what a one-line error quotes of a cause."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


class Discard(io.TextIOBase):
    """A text stream that keeps nothing (the notes and progress of a process that does not
    report: the other processes of a distributed run)."""

    def writable(self) -> bool:
        """True: writes are accepted (and dropped)."""
        return True

    def write(self, text: str) -> int:
        """Drop `text`; returns its length, as if it had been written."""
        return len(text)
