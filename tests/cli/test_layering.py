"""The layering table of the design, read from the code with ``ast``.

Every way a module can reach another counts: imports at module level or inside functions
(relative ones resolved), loads by name (``importlib.import_module``, ``__import__``,
``runpy.run_module``, constant or f-string prefix) and loads by path
(``spec_from_file_location``, ``runpy.run_path``, file loaders, ``sys.path`` edits), which
no table can follow and so are refused anywhere in ``exactmem/``.  ``proofs/`` sits above the
package: it imports exactmem, exactmem runs it as a program and never loads it.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "exactmem"

# package -> top-level names it must not import (exactmem.X means the subpackage X)
FORBIDDEN = {
    "arith": {"exactmem.model", "exactmem.constructions", "exactmem.certificate",
              "exactmem.checker", "exactmem.search", "exactmem.importers", "exactmem.exporters",
              "exactmem.floats", "exactmem.pipeline",
              "exactmem.cli", "exactmem.commands", "exactmem.files", "exactmem.datasets",
              "z3", "torch"},
    "model": {"z3", "torch", "exactmem.constructions", "exactmem.search", "exactmem.importers",
              "exactmem.exporters", "exactmem.floats",
              "exactmem.certificate", "exactmem.checker.net_forward",
              "exactmem.checker.softmax_check", "exactmem.checker.verify", "exactmem.datasets"},
    "constructions": {"z3", "torch", "exactmem.checker", "exactmem.search",
                      "exactmem.importers", "exactmem.exporters", "exactmem.floats"},
    "certificate": {"z3", "torch", "exactmem.search", "exactmem.importers",
                    "exactmem.exporters", "exactmem.floats"},
    "search": {"torch", "exactmem.importers", "exactmem.exporters", "exactmem.floats"},
    # importers, exporters, float analysis: with lm/, the only places torch is imported
    "importers": {"z3", "exactmem.search"},
    "exporters": {"z3", "exactmem.search"},
    "floats": {"z3", "exactmem.search"},
    # the verbs: cli -> commands -> api -> the layers above; never back up
    "api": {"exactmem.commands", "exactmem.cli"},
    "files": {"z3", "torch"},
    "datasets": {"z3", "torch"},
}
# the rooms that may import only these of exactmem (a prefix stands for its subpackages)
ALLOWED = {
    # the verbs: parse, one API call, print (their own argument helpers aside)
    "commands": {"exactmem.api", "exactmem.errors", "exactmem.progress"},
    "files": {"exactmem.errors"},  # every file exactmem writes: atomic.py
    "datasets": {"exactmem.errors", "exactmem.arith", "exactmem.model", "exactmem.files",
                 "exactmem.progress"},  # dataset generation
}
# folders that are being built: their rule holds once they exist
PLANNED = {
    # the language-model wing: the design's row (it may import torch: checkpoint importers,
    # LM exports)
    "lm": {"z3", "exactmem.constructions", "exactmem.search"},
}
for _package, _rule in PLANNED.items():
    if (ROOT / _package).is_dir():
        FORBIDDEN[_package] = set(_rule)
# no layer below the API imports the API, the verbs or the command line
for _package in FORBIDDEN:
    if _package not in ("api", "arith"):
        FORBIDDEN[_package] |= {"exactmem.api", "exactmem.commands", "exactmem.cli"}
TORCH_ROOMS = ("lm/", "importers/", "exporters/", "floats/")


# what a module loads -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Load:
    """One way a module reaches another: ``kind`` is ``import`` (a statement, anywhere),
    ``name`` (a load by a name computed at run time) or ``path`` (a load by file path or a
    ``sys.path`` edit; ``name`` then says which call)."""

    kind: str
    name: str
    line: int


NAME_LOADERS = {"import_module", "__import__", "run_module"}
PATH_LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader", "SourcelessFileLoader",
                "ExtensionFileLoader", "load_source", "load_module", "zipimporter",
                "addsitedir", "spec_from_loader", "FileFinder"}
SYS_PATH_EDITS = {"insert", "append", "extend", "remove", "clear", "__setitem__", "__iadd__"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _constant_name(node: ast.expr, module: str, package: str) -> str | None:
    """The module name a load-by-name argument gives, or its fixed prefix (an f-string
    ``f"exactmem.commands.{x}"`` gives ``exactmem.commands``); ``None`` when unknowable."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                text += part.value
            elif isinstance(part, ast.FormattedValue) and _dotted(part.value) == "__name__":
                text += module
            elif isinstance(part, ast.FormattedValue) and _dotted(part.value) == "__package__":
                text += package
            else:
                break
        return text.rstrip(".") or None
    if _dotted(node) == "__name__":
        return module
    return None


def _resolve(name: str, level: int, package: str) -> str:
    if not level:
        return name
    up = package.split(".")[:len(package.split(".")) - level + 1]
    return ".".join(up + ([name] if name else []))


def _is_sys_path(node: ast.expr) -> bool:
    target = node.value if isinstance(node, ast.Subscript) else node
    return _dotted(target) == "sys.path"


def loads(path: Path, module: str = "", is_package: bool = False,
          modules: frozenset[str] = frozenset()) -> list[Load]:
    """Every load in ``path`` (the module ``module``; ``modules``: the known module names,
    so that ``from P import x`` counts as loading ``P.x`` when that is a module)."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[Load] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [Load("import", a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, package)
            out += [Load("import", f"{base}.{a.name}" if f"{base}.{a.name}" in modules
                         else base, node.lineno) for a in node.names]
        elif isinstance(node, ast.Call):
            func = _dotted(node.func).rpartition(".")[2]
            if func in NAME_LOADERS and node.args:
                name = _constant_name(node.args[0], module, package)
                if name is not None and name.startswith("."):
                    anchor = next((_constant_name(k.value, module, package)
                                   for k in node.keywords if k.arg == "package"), package)
                    dots = len(name) - len(name.lstrip("."))
                    name = _resolve(name.lstrip("."), dots, anchor or package)
                if name:
                    out.append(Load("name", name, node.lineno))
            elif func in PATH_LOADERS:
                out.append(Load("path", func, node.lineno))
            elif isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value) \
                    and node.func.attr in SYS_PATH_EDITS:
                out.append(Load("path", f"sys.path.{node.func.attr}", node.lineno))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_sys_path(t) for t in targets):
                out.append(Load("path", "sys.path =", node.lineno))
    return out


def module_names(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` (a package directory): dotted name -> (file, is package)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def all_loads(root: Path) -> dict[str, tuple[Path, list[Load]]]:
    """Module -> (its file, its loads), for every module of the package at ``root``."""
    mods = module_names(root)
    known = frozenset(mods)
    return {mod: (path, loads(path, mod, package, known))
            for mod, (path, package) in mods.items()}


def imports(path: Path) -> list[str]:
    """The names a file imports or loads by name (relative imports resolved when the file
    lies in ``exactmem/``)."""
    try:
        parts = list(path.resolve().relative_to(REPO).with_suffix("").parts)
    except ValueError:
        parts = []
    package = bool(parts) and parts[-1] == "__init__"
    module = ".".join(parts[:-1] if package else parts)
    return [x.name for x in loads(path, module, package) if x.kind != "path"]


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def table_violations(root: Path, forbidden: dict[str, set[str]],
                     allowed: dict[str, set[str]]) -> list[str]:
    """Every load (statement or by name) that the table forbids, and every load by path."""
    bad = []
    for path, found in all_loads(root).values():
        rel = path.relative_to(root).as_posix()
        package = rel.split("/")[0] if "/" in rel else ""
        for x in found:
            where = f"{rel}:{x.line}"
            if x.kind == "path":
                bad.append(f"{where}: loads by path ({x.name}), which the table cannot see")
                continue
            if any(x.name == b or x.name.startswith(b + ".") for b in forbidden.get(package, ())):
                bad.append(f"{where}: {package} must not {x.kind == 'name' and 'load' or 'import'}"
                           f" {x.name}")
            ours = x.name.startswith(root.name + ".")
            if package in allowed and ours and not x.name.startswith(f"{root.name}.{package}") \
                    and not any(x.name == a or x.name.startswith(a + ".")
                                for a in allowed[package]):
                bad.append(f"{where}: {package} may import only {sorted(allowed[package])},"
                           f" not {x.name}")
    return bad


FAST_PATH = ("checker/lm/lm_limbs.py", "checker/lm/lm_fastgelu.py",
             "checker/lm/lm_fastweights.py")  # NumPy, optionally


def test_checker_imports_only_the_standard_library() -> None:
    found = files("checker")
    assert found, "the checker package is missing"
    for path in found:
        fast = path.relative_to(ROOT).as_posix() in FAST_PATH
        for name in imports(path):
            assert name.split(".")[0] in sys.stdlib_module_names or name == "exactmem.checker" \
                or name.startswith("exactmem.checker.") or fast and name == "numpy", \
                f"{path}: imports {name}"


@pytest.mark.parametrize("module", FAST_PATH)
def test_the_fast_path_imports_numpy_only_optionally(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text())
    guarded = [node for node in tree.body if isinstance(node, ast.Try)
               and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError"
                       for h in node.handlers)]
    inside = {id(n) for t in guarded for n in ast.walk(t)}
    numpy = [n for n in ast.walk(tree) if isinstance(n, ast.Import)
             and any(a.name == "numpy" for a in n.names)]
    assert numpy and all(id(n) in inside for n in numpy)


def test_checker_uses_no_floats_or_exp() -> None:
    for path in files("checker"):
        text = path.read_text()
        fast = path.relative_to(ROOT).as_posix() in FAST_PATH
        for word in ("float(", "math.exp") + (() if fast else ("numpy",)):
            assert word not in text, f"{path} mentions {word}"


def test_layers_respect_the_table() -> None:
    assert table_violations(ROOT, FORBIDDEN, ALLOWED) == []


def test_only_the_torch_rooms_import_torch_and_only_search_imports_z3() -> None:
    for path, found in all_loads(ROOT).values():
        rel = path.relative_to(ROOT).as_posix()
        for x in found:
            top = x.name.split(".")[0]
            if top == "torch":
                assert rel.startswith(TORCH_ROOMS), f"{rel} imports torch"
            if top == "z3":
                assert rel.startswith("search/"), f"{rel} imports z3"


def test_the_layering_test_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\nfrom exactmem.model import spec\n")
    assert "numpy" in imports(bad) and "exactmem.model" in imports(bad)


PLANTED = {
    "lazy": "def f():\n    from exactmem.search import drive\n    return drive\n",
    "relative": "def f():\n    from ..search import drive\n    return drive\n",
    "by_name": "import importlib\nm = importlib.import_module('exactmem.search.drive')\n",
    "relative_name": "import importlib\n"
                     "m = importlib.import_module('..search', package=__package__)\n",
    "f_string": "import importlib\n"
                "def f(x):\n    return importlib.import_module(f'exactmem.search.{x}')\n",
    "dunder": "m = __import__('exactmem.search')\n",
    "run_module": "import runpy\nrunpy.run_module('exactmem.search.drive')\n",
}
BY_PATH = {
    "spec": "import importlib.util\n"
            "s = importlib.util.spec_from_file_location('x', '/tmp/x.py')\n",
    "run_path": "import runpy\nrunpy.run_path('proofs/__main__.py')\n",
    "sys_path": "import sys\nsys.path.insert(0, '/somewhere')\n",
    "sys_path_set": "import sys\nsys.path = ['/somewhere']\n",
    "loader": "from importlib.machinery import SourceFileLoader\n"
              "SourceFileLoader('x', 'x.py').load_module()\n",
}


def _plant(tmp_path: Path, name: str, text: str) -> Path:
    pkg = tmp_path / "exactmem"
    for folder in ("model", "search", "search/drive"):
        (pkg / folder).mkdir(parents=True, exist_ok=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / f"{name}.py").write_text(text)
    return pkg


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_every_kind_of_load_across_the_table_is_caught(tmp_path: Path, name: str) -> None:
    pkg = _plant(tmp_path, name, PLANTED[name])
    bad = table_violations(pkg, FORBIDDEN, ALLOWED)
    assert len(bad) == 1 and "model must not" in bad[0] and "exactmem.search" in bad[0], bad
    (pkg / "model" / f"{name}.py").write_text(PLANTED[name].replace("search", "model"))
    assert table_violations(pkg, FORBIDDEN, ALLOWED) == []


@pytest.mark.parametrize("name", sorted(BY_PATH))
def test_a_load_by_path_is_caught(tmp_path: Path, name: str) -> None:
    bad = table_violations(_plant(tmp_path, name, BY_PATH[name]), FORBIDDEN, ALLOWED)
    assert bad and all("loads by path" in b for b in bad), bad


def test_a_room_with_an_allow_list_is_held_to_it(tmp_path: Path) -> None:
    pkg = _plant(tmp_path, "x", "")
    (pkg / "files").mkdir()
    (pkg / "files" / "atomic.py").write_text("import os\nfrom exactmem.errors import E\n")
    assert table_violations(pkg, FORBIDDEN, ALLOWED) == []
    (pkg / "files" / "atomic.py").write_text("from exactmem.model import spec\n")
    assert "files may import only" in " ".join(table_violations(pkg, FORBIDDEN, ALLOWED))


# proofs/: a program above the package ------------------------------------------------------
def test_nothing_in_exactmem_loads_proofs() -> None:
    """``exactmem prove`` runs ``proofs/`` as a program: no import of it, by statement, name
    or path (loads by path are refused everywhere by the table test)."""
    for path, found in all_loads(ROOT).values():
        for x in found:
            assert not (x.name == "proofs" or x.name.startswith(("proofs.", "exactmem._proofs"))), \
                f"{path}:{x.line} loads {x.name}"
    runner = ast.parse((ROOT / "api" / "lemmas.py").read_text())
    calls = {_dotted(n.func) for n in ast.walk(runner) if isinstance(n, ast.Call)}
    assert "subprocess.Popen" in calls
    assert any(isinstance(n, ast.Constant) and n.value == "-m" for n in ast.walk(runner))


def test_proofs_import_exactmem_only_downward() -> None:
    """``proofs/`` may use any layer of exactmem but not the verbs that run it."""
    found = sorted((REPO / "proofs").glob("*.py"))
    assert found
    for path in found:
        for x in loads(path, f"proofs.{path.stem}", path.stem == "__init__"):
            assert x.kind != "path", f"{path}:{x.line}: loads by path"
            assert not x.name.startswith(("exactmem.cli", "exactmem.commands", "exactmem.api")),\
                f"{path}:{x.line}: imports {x.name}"


def test_commands_import_only_the_api() -> None:
    """Every verb is parse -> one ``exactmem.api`` call -> print: ``commands/`` reaches
    nothing of exactmem but the API, the errors, progress and its own helpers."""
    rule = {"commands": ALLOWED["commands"]}
    assert table_violations(ROOT, {}, rule) == []
    assert not any(x.name.startswith("exactmem.") and not x.name.startswith(
        ("exactmem.api", "exactmem.errors", "exactmem.progress", "exactmem.commands"))
        for path in files("commands") for x in loads(path, "exactmem.commands.m"))


def test_a_command_reaching_past_the_api_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "exactmem"
    for rel, text in (("__init__.py", ""), ("api/__init__.py", ""), ("checker/__init__.py", ""),
                      ("commands/__init__.py", ""),
                      ("commands/ok.py", "from exactmem.api import verbs\n"),
                      ("commands/bad.py", "def run():\n    from exactmem.checker import x\n")):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    bad = table_violations(pkg, {}, {"commands": ALLOWED["commands"]})
    assert len(bad) == 1 and bad[0].startswith("commands/bad.py:2: commands may import only")


# one name, one module ------------------------------------------------------------------------
def shared_base_names(root: Path) -> dict[str, list[str]]:
    """Base names that two or more modules share (``__init__`` and ``__main__`` aside)."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.stem not in ("__init__", "__main__"):
            seen[path.name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_no_two_modules_share_a_base_name() -> None:
    assert shared_base_names(ROOT) == {}


def test_a_shared_base_name_is_detected(tmp_path: Path) -> None:
    for rel in ("a/__init__.py", "b/__init__.py", "a/results.py", "b/results.py", "b/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert shared_base_names(tmp_path) == {"results.py": ["a/results.py", "b/results.py"]}


def prefixed_outside_the_wing(root: Path) -> list[str]:
    """Modules named ``lm_*.py`` outside the language-model wing (``lm/``, ``checker/lm/``):
    the wing is a folder, not a file-name prefix."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("lm_*.py"))
            if p.parent.relative_to(root).as_posix() not in ("lm", "checker/lm")]


def test_no_lm_prefixed_module_outside_the_wing() -> None:
    assert prefixed_outside_the_wing(ROOT) == []


def test_an_lm_prefixed_module_outside_the_wing_is_detected(tmp_path: Path) -> None:
    for rel in ("lm/lm_ok.py", "checker/lm/lm_ok2.py", "api/lm_stray.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert prefixed_outside_the_wing(tmp_path) == ["api/lm_stray.py"]


# the import graph of the whole package --------------------------------------------------
def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports or loads by name, at module level or
    inside functions (``from P import x`` counts as importing ``P.x`` when that is a module,
    else ``P``; relative imports are resolved; a load by an f-string counts as loading its
    fixed prefix).  The implicit import of a parent package's ``__init__`` is not an edge
    (every module would then depend on its package)."""
    found = all_loads(root)

    def known(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in found}
    for mod, (_, mine) in found.items():
        for x in mine:
            target = known(x.name) if x.kind != "path" else None
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


def unresolved_imports(root: Path) -> list[str]:
    """``exactmem...`` names loaded anywhere under ``root`` (lazy loads included) that are
    neither a module of the package nor a name inside one: a load left behind by a rename."""
    mods = module_names(ROOT)
    bad = []
    for path in sorted(root.rglob("*.py")):
        for name in imports(path):
            if not name.startswith("exactmem.") or name in mods:
                continue
            parent, _, last = name.rpartition(".")
            # ``from exactmem.x import name`` may be listed as ``exactmem.x.name``: then
            # ``name`` must be a word of ``x``'s source
            if parent not in mods or not re.search(rf"\b{re.escape(last)}\b",
                                                   mods[parent][0].read_text()):
                bad.append(f"{path.relative_to(REPO)}: {name}")
    return bad


def test_every_load_names_a_module_that_exists() -> None:
    assert unresolved_imports(ROOT) == []


def test_a_load_of_a_renamed_module_is_caught(tmp_path: Path) -> None:
    planted = ROOT / "api" / "_planted_probe.py"
    planted.write_text("def f():\n    from exactmem.checker.no_such_module import X\n")
    try:
        assert any("no_such_module" in b for b in unresolved_imports(ROOT / "api"))
    finally:
        planted.unlink()
