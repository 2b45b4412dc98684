"""The layering table of the design, read from the imports with ``ast``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

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
}


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
                assert rel.startswith("adapters/"), f"{rel} imports torch"
            if top == "z3":
                assert rel.startswith("search/"), f"{rel} imports z3"


def test_the_layering_test_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\nfrom exactmem.model import spec\n")
    assert "numpy" in imports(bad) and "exactmem.model" in imports(bad)
