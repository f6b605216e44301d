"""Rewrite the headline numbers of README.md, docs/performance.md and docs/distillation.md from
their records.

The speed table, the MuJoCo table, the classic-control, arm and memory tasks' table, the
quadruped's table, the GPU table and the distillation pipeline's tables (over seeds, and each
seed's) sit between generated markers (scripts/bench/report/headlines.py); each is written from
records in docs/bench, and each names its records' commits and dates. Run after a benchmark
writes a record; tests/scripts/bench/test_bench_headlines.py fails while a page says other than
its records.

    python -m scripts.bench.headlines           # rewrite the blocks
    python -m scripts.bench.headlines --check   # exit 1, naming the blocks that differ
"""

from __future__ import annotations

import sys

from scripts.bench.lib import args as cli_args
from scripts.bench.lib.proc import ROOT
from scripts.bench.report import headlines

MODULE = "scripts.bench.headlines"


def run(args) -> int:
    """Rewrite (or check) every page's blocks."""
    stale = []
    for path, (text, written) in headlines.pages().items():
        rel = path.relative_to(ROOT)
        if text == written:
            continue
        if args.check:
            stale.append(str(rel))
        else:
            path.write_text(written)
            print(f"wrote {rel}")
    if stale:
        print(f"{MODULE}: not what their records give: {', '.join(stale)} "
              f"(run `python -m {MODULE}`)", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def build_parser() -> cli_args.Parser:
    """The command line."""
    p = cli_args.parser(MODULE, __doc__)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where stale")
    return p


def main(argv: list[str] | None = None) -> int:
    """Rewrite the headline blocks with `argv` (the process's arguments when None)."""
    return cli_args.run_main(build_parser(), run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
