"""Reading the documentation pages: their fenced code blocks and marks, the `embodied-ppo`
commands they write, their links and their headings' anchors.

A fenced block is preceded by one of these marks (on the line right before it):

    <!-- runnable -->                    executed (bash: `bash -e`, python: `python`)
    <!-- runnable: OLD => NEW; ... -->   executed with each OLD replaced by NEW (small budgets)
    <!-- runnable as NAME -->            saved as NAME in the page's folder, then run if it is
                                         bash or python (a module or config later blocks use)
    <!-- not run: REASON -->             not executed, for the reason given (output, C++, ...)

The blocks of one page run in order in one scratch folder (tests/docs/test_runnable.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from support import ROOT

# Every page: the README and the docs folder.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Pages written by a script from recorded results (edited there, not here): their inline
# command fragments (`embodied-ppo eval --seed 10000`) name an option, not a whole command.
GENERATED = {"docs/benchmarks.md": "scripts/bench/mujoco.py"}

FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
MARK = re.compile(
    r"<!-- (?:(?P<run>runnable)(?: as (?P<file>\S+))?(?::(?P<subs>.*?))?"
    r"|not run: (?P<reason>.+?)) -->\s*$"
)


@dataclass
class Block:
    """One fenced code block of a page, with its mark."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str  # as written
    mark: str | None  # "runnable", "not run" or None (unmarked)
    file: str | None = None  # `runnable as NAME`
    subs: list[tuple[str, str]] | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{rel(self.page)}:{self.line}"

    def code_to_run(self) -> str:
        """The code with the mark's substitutions applied."""
        code = self.code
        for old, new in self.subs or []:
            assert old in code, f"{self.where}: the mark's {old!r} is not in its block"
            code = code.replace(old, new)
        return code


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in order, with the mark on the line before it."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        block = Block(page, line, m.group("lang"), m.group("code").rstrip("\n"), None)
        if mark and mark.group("run"):
            block.mark, block.file = "runnable", mark.group("file")
            block.subs = [
                tuple(x.strip() for x in sub.split("=>", 1))
                for sub in (mark.group("subs") or "").split(";")
                if "=>" in sub
            ]
        elif mark:
            block.mark, block.reason = "not run", mark.group("reason").strip()
        out.append(block)
    return out


def prose(text: str) -> str:
    """`text` without its fenced blocks and HTML comments (what a reader sees as text)."""
    text = FENCE.sub("", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


# ----------------------------------------------------------------------------------- commands
CLI = ("embodied-ppo",)
USAGE = ("...", " [", "|", "<", ">")  # an inline span in usage notation, not a command


def _simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, as argument lists (comments dropped)."""
    line = line.replace("$(which embodied-ppo)", "embodied-ppo")
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a shell line
        return []
    commands, current = [], []
    for tok in tokens:
        if set(tok) <= set(";&|") or tok in ("do", "then", "else", "done", "fi"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        commands.append(current)
    return commands


def cli_argv(words: list[str]) -> list[str] | None:
    """The arguments given to embodied-ppo by one simple command, or None if it runs none."""
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # VAR=value prefixes
        words = words[1:]
    if not words:
        return None
    if words[0] in CLI:
        return words[1:]
    if words[:3] == ["python", "-m", "embodied_ppo"]:
        return words[3:]
    if words[0] == "torchrun":
        for i, w in enumerate(words):
            if w == "-m" and words[i + 1 : i + 2] == ["embodied_ppo"]:
                return words[i + 2 :]
            if w in CLI:
                return words[i + 1 :]
    return None


def shell_commands(code: str) -> list[list[str]]:
    """embodied-ppo argument lists of a shell block (continuation lines joined)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        for words in _simple_commands(line):
            argv = cli_argv(words)
            if argv is not None:
                out.append(argv)
    return out


def inline_commands(text: str) -> list[list[str]]:
    """embodied-ppo argument lists of the page's inline code spans that are whole commands."""
    out = []
    for span in re.findall(r"`([^`\n]+)`", prose(text)):
        if not span.startswith(CLI[0] + " ") or any(u in span for u in USAGE):
            continue
        if len(span.split()) == 2:  # `embodied-ppo eval`: the name of a command
            continue
        for words in _simple_commands(span):
            argv = cli_argv(words)
            if argv is not None:
                out.append(argv)
    return out


# -------------------------------------------------------------------------------------- links
def links(text: str) -> list[str]:
    """Targets of the page's markdown links and images (outside code)."""
    text = re.sub(r"`[^`\n]*`", "", prose(text))
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?)\s*$", FENCE.sub("", text), re.M):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out
