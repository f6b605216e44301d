"""Command lines of the benchmarks: bad input is one line and exit status 2, before anything runs.

Every entry point builds its parser with `parser(module, doc)` and runs its body through
`run_main`: argparse's own errors, and a `BadInput` raised anywhere below (a results file the
benchmark did not write, a setting it does not take), print `<module>: error: <message>` on one
line (no usage, no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn


class BadInput(Exception):
    """Input a benchmark refuses: its message is the one line the user sees."""


class Parser(argparse.ArgumentParser):
    """argparse that reports an error in one line, `PROG: error: MESSAGE`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit 2 (argparse prints the usage first)."""
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parser(module: str, doc: str | None, raw: bool = True) -> Parser:
    """The parser of the entry point `module` (its dotted name, the program's name in errors),
    described by the module's docstring, laid out as written where `raw`."""
    formatter = argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter
    return Parser(prog=module, description=doc, formatter_class=formatter)


def run_main(
    p: Parser, body: Callable[[argparse.Namespace], int | None], argv: Sequence[str] | None
) -> int:
    """Parse `argv` (the process's arguments when None) and run `body` on them; a `BadInput`
    becomes the parser's one-line error. The exit status: body's, 0 when it returns None."""
    args = p.parse_args(None if argv is None else list(argv))
    try:
        return body(args) or 0
    except BadInput as exc:
        p.error(str(exc))
