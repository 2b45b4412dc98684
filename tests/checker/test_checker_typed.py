"""The checker is typed throughout (docs/checker.md): every function outside ``lm/`` annotates
each parameter and its return, as ``mypy --strict`` asks; pyproject.toml holds the checker to
the strict options when ``mypy exactmem`` runs.  Read with ``ast``: no type checker needed."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import exactmem.checker

ROOT = Path(exactmem.checker.__file__).resolve().parent
PYPROJECT = ROOT.parents[1] / "pyproject.toml"
STRICT = ("disallow_any_generics", "disallow_untyped_calls", "disallow_untyped_defs",
          "disallow_incomplete_defs", "warn_return_any", "no_implicit_reexport")


def _sources() -> list[Path]:
    files = [p for p in sorted(ROOT.rglob("*.py")) if "lm" not in p.relative_to(ROOT).parts[:-1]]
    assert len(files) > 20 and ROOT / "verify.py" in files
    return files


def _untyped(tree: ast.AST) -> list[str]:
    """``name:line`` of every function missing a parameter or return annotation."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        params = [p for p in params if p.arg not in ("self", "cls")]
        if node.returns is None or any(p.annotation is None for p in params):
            out.append(f"{node.name}:{node.lineno}")
    return out


def test_every_checker_function_is_annotated() -> None:
    missing = {p.relative_to(ROOT).as_posix(): bad for p in _sources()
               if (bad := _untyped(ast.parse(p.read_text())))}
    assert missing == {}


def test_the_annotation_rule_can_fail() -> None:
    assert _untyped(ast.parse("def f(x, y: int) -> int: ...\ndef g(y: int): ...")) == \
        ["f:1", "g:2"]
    assert _untyped(ast.parse("class A:\n    def f(self, k: int = 1) -> None: ...")) == []


def test_mypy_holds_the_checker_to_the_strict_options() -> None:
    overrides = tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]["overrides"]
    checker = next(o for o in overrides if "exactmem.checker.*" in o["module"])
    assert all(checker.get(flag) is True for flag in STRICT), checker
