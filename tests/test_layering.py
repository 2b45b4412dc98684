"""The layering table of the design, read from the imports with ``ast``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "exactmem"

# package -> top-level names it must not import (exactmem.X means the subpackage X)
FORBIDDEN = {
    "arith": {"exactmem.model", "exactmem.constructions", "exactmem.certificate",
              "exactmem.checker", "exactmem.search", "exactmem.adapters", "exactmem.pipeline",
              "exactmem.cli", "exactmem.commands", "z3", "torch"},
    "model": {"z3", "torch", "exactmem.constructions", "exactmem.search", "exactmem.adapters",
              "exactmem.certificate", "exactmem.checker.forward", "exactmem.checker.interval",
              "exactmem.checker.verify"},
    "constructions": {"z3", "torch", "exactmem.checker", "exactmem.search",
                      "exactmem.adapters"},
    "certificate": {"z3", "torch", "exactmem.search", "exactmem.adapters"},
    "search": {"torch", "exactmem.adapters"},
    "adapters": {"z3", "exactmem.search"},
    "lm": {"z3", "exactmem.constructions", "exactmem.search"},
    # the verbs: cli -> commands -> api -> the layers above; never back up
    "api": {"exactmem.commands", "exactmem.cli"},
}
# no layer below the API imports the API, the verbs or the command line
for _package in ("model", "constructions", "certificate", "search", "adapters", "lm"):
    FORBIDDEN[_package] |= {"exactmem.api", "exactmem.commands", "exactmem.cli"}


def imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_checker_imports_only_the_standard_library() -> None:
    found = files("checker")
    assert found, "the checker package is missing"
    for path in found:
        for name in imports(path):
            assert name.split(".")[0] in sys.stdlib_module_names, f"{path}: imports {name}"


def test_checker_uses_no_floats_or_exp() -> None:
    for path in files("checker"):
        text = path.read_text()
        for word in ("float(", "math.exp", "numpy"):
            assert word not in text, f"{path} mentions {word}"


def test_layers_respect_the_table() -> None:
    for package, banned in FORBIDDEN.items():
        for path in files(package):
            for name in imports(path):
                for b in banned:
                    assert name != b and not name.startswith(b + "."), \
                        f"{path}: {package} must not import {name}"


def test_only_adapters_import_torch_and_only_search_imports_z3() -> None:
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        for name in imports(path):
            top = name.split(".")[0]
            if top == "torch":
                assert rel.startswith(("adapters/", "lm/")), f"{rel} imports torch"
            if top == "z3":
                assert rel.startswith("search/"), f"{rel} imports z3"


def test_the_layering_test_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\nfrom exactmem.model import spec\n")
    assert "numpy" in imports(bad) and "exactmem.model" in imports(bad)


# the import graph of the whole package --------------------------------------------------
def module_names(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` (a package directory): dotted name -> (file, is package)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, at module level or inside functions
    (``from P import x`` counts as importing ``P.x`` when that is a module, else ``P``;
    relative imports are resolved).  The implicit import of a parent package's
    ``__init__`` is not an edge (every module would then depend on its package)."""
    mods = module_names(root)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, package) in mods.items():
        here = mod if package else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            else:
                continue
            for name in names:
                target = known(name)
                if target is not None and target != mod:
                    graph[mod].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or ``None``
    (iterative depth-first search: white, grey on the stack, black done)."""
    state = dict.fromkeys(graph, 0)
    for start in sorted(graph):
        if state[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child, 2) == 1:
                path = [n for n, _ in stack]
                return path[path.index(child):] + [child]
            elif state.get(child) == 0:
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_no_import_cycle_anywhere_in_exactmem() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100 and "exactmem.search.drive.query" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_planted_cycle_is_detected(tmp_path: Path) -> None:
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    assert find_cycle(import_graph(pkg)) == ["planted.a", "planted.sub.b", "planted.a"]
    (pkg / "sub" / "b.py").write_text("import json\n")
    assert find_cycle(import_graph(pkg)) is None


# the layers of the search wing -----------------------------------------------------------
SEARCH_LAYERS = ("question", "encode", "solvers", "finders", "drive")


def layer_violations(graph: dict[str, set[str]], prefix: str = "exactmem.search") \
        -> list[str]:
    """Imports from a search layer to a higher one (or to the package's ``__init__``)."""
    rank = {f"{prefix}.{name}": k for k, name in enumerate(SEARCH_LAYERS)}

    def layer(mod: str) -> int | None:
        for pkg, k in rank.items():
            if mod == pkg or mod.startswith(pkg + "."):
                return k
        return len(rank) if mod == prefix else None  # the package facade sits on top

    bad = []
    for mod, targets in graph.items():
        mine = layer(mod)
        if mine is None or mod == prefix:
            continue
        bad += [f"{mod} imports {t}" for t in sorted(targets)
                if (k := layer(t)) is not None and k > mine]
    return bad


def test_every_search_module_sits_in_a_layer() -> None:
    loose = [p.name for p in (ROOT / "search").glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"search modules outside the layers: {loose}"
    found = sorted(p.name for p in (ROOT / "search").iterdir()
                   if p.is_dir() and p.name != "__pycache__")
    assert found == sorted(SEARCH_LAYERS)


def test_search_layers_import_only_lower_ones() -> None:
    assert layer_violations(import_graph(ROOT)) == []


@pytest.mark.parametrize(("low", "high", "bad"), [("question", "drive", True),
                                                   ("finders", "solvers", False)])
def test_an_upward_search_import_is_detected(low: str, high: str, bad: bool) -> None:
    graph = {f"exactmem.search.{low}.x": {f"exactmem.search.{high}.y"},
             f"exactmem.search.{high}.y": set()}
    assert bool(layer_violations(graph)) is bad


def test_no_module_of_the_search_wing_is_long() -> None:
    long = {p.relative_to(ROOT).as_posix(): n for p in (ROOT / "search").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 420}
    assert long == {}
