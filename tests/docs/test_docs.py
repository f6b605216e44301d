"""The documentation holds together: every code block is marked (run, or not run and why),
every `embodied-ppo` command it writes parses with the CLI's own parser and names configs that
exist, every relative link and image resolves, the configuration reference is what the schema
generates, and docs/design.md has a section for every rule the code cites."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys

import pytest
from doc_pages import GENERATED, PAGES, anchors, blocks, inline_commands, links, rel, shell_commands
from support import ROOT

from embodied_ppo.app.cli import build_parser
from embodied_ppo.core.errors import UserError

# Pages another change writes: a link to one is checked once the page exists.
LATER = {"docs/legged.md"}

PAGE_IDS = [rel(p) for p in PAGES]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_code_block_is_marked_run_or_not_run(page):
    unmarked = [b.where for b in blocks(page) if b.mark is None]
    assert not unmarked, (
        f"blocks without <!-- runnable --> or <!-- not run: reason --> before them: {unmarked}"
    )
    for b in blocks(page):
        b.code_to_run()  # every substitution of a mark finds its text
        if b.mark == "runnable" and b.file is None:
            assert b.lang in ("bash", "python"), f"{b.where}: runnable {b.lang!r} block"


def _commands(page) -> list[tuple[str, list[str]]]:
    out = []
    for b in blocks(page):
        if b.lang in ("bash", "sh", "console", ""):
            out += [(b.where, argv) for argv in shell_commands(b.code)]
    if rel(page) not in GENERATED:
        out += [(rel(page), argv) for argv in inline_commands(page.read_text())]
    return out


def _parse(argv: list[str]):
    """argv parsed by the CLI's parser (torchrun's options first, as the CLI takes them)."""
    if argv[:1] == ["torchrun"]:
        split = [i for i, a in enumerate(argv) if a in ("train", "eval", "export", "plot")]
        assert split, "torchrun without a command"
        argv = argv[split[0] :]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return build_parser().parse_args(argv)
        except SystemExit as exc:  # --version, --help
            assert exc.code == 0
            return None


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_command_parses_and_names_configs_that_exist(page):
    for where, argv in _commands(page):
        try:
            args = _parse(argv)
        except UserError as exc:
            pytest.fail(f"{where}: `embodied-ppo {' '.join(argv)}`: {exc}")
        config = getattr(args, "config", None)
        if config and config.endswith(".yaml") and config.startswith("configs/"):
            assert (ROOT / config).is_file(), f"{where}: {config} does not exist"


def test_the_command_check_sees_the_commands():
    readme = _commands(ROOT / "README.md")
    assert any(argv[:1] == ["train"] for _, argv in readme)
    assert ["train", "--resume", "RUN_DIR"] in [a for _, a in _commands(ROOT / "docs/commands.md")]
    with pytest.raises(UserError):
        _parse(["train", "--no-such-option"])


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_relative_links_and_images_resolve(page):
    broken = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            if rel(dest) in LATER:
                continue
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{rel(page)}: broken links {broken}"


def test_readme_is_at_most_20_kb_and_keeps_the_ci_test_command():
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= 20 * 1024, f"README.md is {readme.stat().st_size} bytes"
    ci_command = 'pip install -e ".[test]" && python -m pytest -n auto -rs'
    assert any(b.code.strip() == ci_command for b in blocks(readme))
    assert ci_command in (ROOT / ".ci" / "run").read_text()


def test_the_configuration_reference_is_generated_from_the_schema():
    module = _script("config_reference")
    assert (ROOT / "docs" / "configuration.md").read_text() == module.page(), (
        "docs/configuration.md is stale: run `python scripts/config_reference.py --write`"
    )


def test_every_config_key_has_a_meaning_and_a_row():
    import dataclasses

    from embodied_ppo.config import schema

    module = _script("config_reference")
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert list(module.BLOCKS) == [f.name for f in dataclasses.fields(schema.Config)]
    for block, (cls, _) in module.BLOCKS.items():
        for key, *_ in module.rows(cls, block):
            assert f"| `{key.removeprefix(block + '.')}` |" in page, key
    # A key without a meaning is an error of the script, not a blank cell.
    bare = dataclasses.make_dataclass("Bare", [("x", int, dataclasses.field(default=1))])
    with pytest.raises(ValueError, match="no meaning"):
        module.rows(bare, "test")


# ------------------------------------------------------------------------------- the design
RULES = [
    "Termination is not truncation",
    "The normalizer lives inside the policy",
    "Micro-batches never change the math",
    "Every key is honored or rejected",
    "Checkpoints are data",
    "Determinism",
    "Scale changes speed, not the algorithm",
    "Errors speak to the user",
    "One source of truth",
]
DESIGN = ROOT / "docs" / "design.md"


def test_the_design_has_the_nine_rules_in_order():
    headings = re.findall(r"^## Rule (\d): (.+?)\s*$", DESIGN.read_text(), re.M)
    assert headings == [(str(i), r) for i, r in enumerate(RULES, 1)]


def _sources():
    for folder in ("embodied_ppo", "envs", "scripts", "examples", "tests"):
        yield from (ROOT / folder).rglob("*.py")


def test_every_rule_the_code_cites_has_its_section():
    text = DESIGN.read_text()
    titles = re.findall(r"^#{2,3} +(.+?)\s*$", text, re.M)
    missing = []
    for path in _sources():
        source = re.sub(r"\s*\n\s*(#\s*)?", " ", path.read_text())  # cites may wrap lines
        for n in re.findall(r"(?:docs/design\.md, |DESIGN )[Rr]ule (\d+)", source):
            if not 1 <= int(n) <= len(RULES):
                missing.append(f"{rel(path)}: rule {n}")
        for title in re.findall(r'docs/design\.md, "([^"]+)"', source):
            if not any(title.lower() in t.lower() for t in titles):
                missing.append(f'{rel(path)}: "{title}"')
    assert not missing, f"cited, but no such section in docs/design.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_cited_function_and_test_exists(page):
    """`path.py::name` in a page names a file of the repository (or of the package) and a def
    or class in it."""
    stale = []
    for path, name in re.findall(r"`([\w./-]+\.py)::([\w.]+)`", page.read_text()):
        # A path from the repository's root, or inside the package (`runner/trainer.py`).
        file = ROOT / path if (ROOT / path).is_file() else ROOT / "embodied_ppo" / path
        last = name.rsplit(".", 1)[-1]
        if not file.is_file() or not re.search(
            rf"^\s*(?:async def|def|class) {last}\b", file.read_text(), re.M
        ):
            stale.append(f"{path}::{name}")
    assert not stale, f"{rel(page)} cites what does not exist: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_file_a_page_names_exists(page):
    """A repository path written in code (`embodied_ppo/vecenv/state.py`) names a file or folder
    of the repository: a page is not left behind when code moves."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    roots = ("embodied_ppo/", "envs/", "tests/", "scripts/", "examples/", "configs/", "docs/")
    missing = []
    for span in re.findall(r"`([^`\s]+)`", text):
        path = span.split("::")[0].rstrip(",.")
        placeholder = re.search(r"[<*$]", path)
        if path.startswith(roots) and not placeholder and not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{rel(page)} names what does not exist: {missing}"
