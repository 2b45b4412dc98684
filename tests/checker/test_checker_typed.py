"""The checker is typed throughout (docs/checker.md): every function, the language-model part
``lm/`` included, annotates each parameter and its return, as ``mypy --strict`` asks;
pyproject.toml holds the whole checker to the strict options when ``mypy exactmem`` runs,
with no override relaxing a part of it.  Read with ``ast``: no type checker needed."""

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
    files = sorted(ROOT.rglob("*.py"))
    assert len(files) > 40 and ROOT / "verify.py" in files
    assert ROOT / "lm" / "lm_verify.py" in files and ROOT / "lm" / "lm_execution.py" in files
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


def _relaxing(overrides: list[dict[str, object]]) -> list[object]:
    """The modules of every override that sets a strict option false for a part of the
    checker (``exactmem.checker`` itself, or any module or pattern below it)."""
    out: list[object] = []
    for o in overrides:
        modules = o["module"] if isinstance(o["module"], list) else [o["module"]]
        if any(str(m).startswith("exactmem.checker") for m in modules) and \
                any(o.get(flag) is False for flag in STRICT):
            out.append(o["module"])
    return out


def test_mypy_holds_the_checker_to_the_strict_options() -> None:
    overrides = tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]["overrides"]
    checker = next(o for o in overrides if "exactmem.checker.*" in o["module"])
    assert all(checker.get(flag) is True for flag in STRICT), checker
    assert _relaxing(overrides) == []


def test_the_override_rule_can_fail() -> None:
    lm = {"module": ["exactmem.checker.lm.*"], "disallow_untyped_defs": False}
    other = {"module": "exactmem.search.*", "disallow_untyped_defs": False}
    assert _relaxing([lm, other]) == [["exactmem.checker.lm.*"]]
