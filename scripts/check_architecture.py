"""Check the package's architecture: layers import only the layers below them, no import circle,
no module over the size limit, a docstring on every public function and class, no function
taking more than six parameters by position; the same size and parameter limits for the
project's tasks (envs/); and, across the repository (the package, its tasks in envs/ and the
programs in scripts/, tests aside), no import circle, and no file of the benchmarks
(scripts/bench/) over the size limit.

    python scripts/check_architecture.py            # exit 1 and one line per violation
    python scripts/check_architecture.py --graph    # also print the layer-to-layer imports

The layers, from the bottom (docs/design.md, "The layers"): core, config, model and io (beside
each other), vecenv, algo, runner, app. The test suite runs this check (tests/test_architecture.py).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "embodied_ppo"

# What each layer may import of the package (besides itself).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "config": frozenset({"core"}),
    "model": frozenset({"core"}),
    "io": frozenset({"core", "config"}),
    "vecenv": frozenset({"core", "config", "io"}),
    "algo": frozenset({"core", "config", "model"}),
    "runner": frozenset({"core", "config", "model", "io", "vecenv", "algo"}),
    "app": frozenset({"core", "config", "model", "io", "vecenv", "algo", "runner"}),
}
# The package's own top-level modules: `__init__` (the lazy public API) and `__main__`.
TOP = {"__init__": frozenset(ALLOWED), "__main__": frozenset({"app"})}
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One import of a package module by another."""

    source: str  # importing module, dotted
    target: str  # imported module, dotted
    line: int
    nested: bool  # inside a function (imported when called, not when loaded)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The package module `name` refers to (a module, or a name inside one)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text())
    out: list[Import] = []
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        nested = id(node) not in top_level and not _in_type_checking(tree, node)
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        for t in targets:
            if not t.startswith(PACKAGE):
                continue
            resolved = resolve(t, known)
            if resolved is not None and resolved != name:
                out.append(Import(name, resolved, node.lineno, nested))
    return out


def _in_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    for top in tree.body:
        guarded = isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test)
        if guarded and any(node is sub for sub in ast.walk(top)):
            return True
    return False


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def check_layers(edges: list[Import]) -> list[str]:
    problems = []
    for e in edges:
        src, dst = layer(e.source), layer(e.target)
        if dst == "__init__":  # the lazy public API itself
            continue
        allowed = TOP.get(src) if src in TOP else ALLOWED.get(src)
        if allowed is None:
            problems.append(f"{e.source}: not in a layer ({', '.join(ALLOWED)})")
        elif src != dst and dst not in allowed:
            problems.append(f"{e.source}:{e.line}: imports {e.target} ({src} may not import {dst})")
    return problems


def cycles(edges: list[Import]) -> list[list[str]]:
    """Import circles among modules (every import counts, nested ones too)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def undocumented(path: Path, name: str) -> list[str]:
    """Public functions, methods and classes without a docstring."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            public = not node.name.startswith("_")
            if public and ast.get_docstring(node) is None and not _trivial(node):
                out.append(f"{name}:{node.lineno}: {node.name} has no docstring")
    return out


def _trivial(node: ast.AST) -> bool:
    """Properties and overrides whose name says it all (a one-line `return self.x`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = [n for n in node.body if not isinstance(n, ast.Expr)]
    decorated = any(ast.unparse(d) in ("property", "staticmethod") for d in node.decorator_list)
    dunder = node.name.startswith("__") and node.name.endswith("__")
    return len(body) == 1 and isinstance(body[0], ast.Return) and (decorated or dunder)


# ------------------------------------------------------------------------- the repository
# Where each importable top-level name of the repository lives: the package, its tasks (envs/,
# installed as embodied_ppo_envs) and its programs (scripts/, a package run from the root).
REPOSITORY = {PACKAGE: PACKAGE, "embodied_ppo_envs": "envs", "scripts": "scripts"}
BENCH_ROOM = "scripts/bench"  # the benchmarks: every file held to MAX_LINES


def repository_modules() -> dict[str, Path]:
    """Every Python module of the repository but its tests, by the dotted name it is imported as."""
    found = {}
    for top, folder in REPOSITORY.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([top, *parts])] = path
    return found


def repository_imports(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The imports of repository modules by the module `name`, relative ones resolved."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..lib import y
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(filter(None, [*up, base]))
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            resolved = resolve(target, known)
            if resolved is None and name.startswith("scripts.") and not node_level(node):
                # A program run by its path has its folder first on sys.path: a bare name
                # there (`import bench_arm`) is the module beside it.
                resolved = resolve(f"{package}.{target}", known)
            if resolved is not None and resolved != name:
                out.append(Import(name, resolved, node.lineno, id(node) not in top_level))
    return out


def node_level(node: ast.AST) -> int:
    """How many dots open a `from` import (0 for an absolute one or a plain `import`)."""
    return getattr(node, "level", 0) or 0


def repository_problems() -> list[str]:
    """Import circles that reach beyond the package (those inside it are found above), and
    files of the benchmarks over MAX_LINES."""
    known = repository_modules()
    edges = [e for n, p in known.items() for e in repository_imports(n, p, known)]
    inside = re.compile(rf"^{PACKAGE}(\.|$)")
    problems = [
        f"import circle: {' -> '.join(c)}"
        for c in cycles(edges)
        if not all(inside.match(m) for m in c)
    ]
    for path in sorted((ROOT / BENCH_ROOM).rglob("*")):
        if path.is_file() and path.suffix in (".py", ".sh"):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                problems.append(f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_LINES})")
    return problems


# At most this many parameters a caller may pass by position (`self` and `cls` aside): more
# become keyword-only or a small settings object, so every call says what each value is.
MAX_POSITIONAL = 6
TASKS = "envs"  # the project's tasks: held to MAX_LINES and MAX_POSITIONAL as the package is


def positional_overloads(path: Path, label: str) -> list[str]:
    """Functions and constructors taking more than MAX_POSITIONAL parameters by position
    (positional-only and ordinary ones; keyword-only ones and *args do not count)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = [a.arg for a in node.args.posonlyargs + node.args.args]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if len(names) > MAX_POSITIONAL:
            out.append(
                f"{label}:{node.lineno}: {node.name} takes {len(names)} parameters by position "
                f"(at most {MAX_POSITIONAL}: make the rest keyword-only or a settings object)"
            )
    return out


def task_problems() -> list[str]:
    """The project's tasks (envs/): files over MAX_LINES, functions over MAX_POSITIONAL."""
    problems = []
    for path in sorted((ROOT / TASKS).rglob("*.py")):
        label = str(path.relative_to(ROOT))
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            problems.append(f"{label}: {n} lines (at most {MAX_LINES})")
        problems += positional_overloads(path, label)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", action="store_true", help="print layer-to-layer imports")
    args = parser.parse_args(argv)
    known = modules()
    edges = [e for name, path in known.items() for e in imports_of(name, path, known)]
    problems = check_layers(edges)
    problems += [f"import circle: {' -> '.join(c)}" for c in cycles(edges)]
    for name, path in known.items():
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            problems.append(f"{name}: {n} lines (at most {MAX_LINES})")
        problems += undocumented(path, name)
        problems += positional_overloads(path, name)
    if args.graph:
        pairs = sorted({(layer(e.source), layer(e.target)) for e in edges})
        for src, dst in pairs:
            print(f"{src} -> {dst}")
    problems += repository_problems()
    problems += task_problems()
    nested = [e for e in edges if e.nested]
    for p in problems:
        print(p)
    print(
        f"{len(known)} modules, {len(edges)} internal imports ({len(nested)} inside functions), "
        f"{len(problems)} problem(s)",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
