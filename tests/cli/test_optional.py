"""One optional-dependency helper (exactmem/optional.py): one message format naming what to
install, and no hand-written import guard elsewhere in the producer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exactmem.errors import MissingDependencyError
from exactmem.optional import missing, need, require

ROOT = Path(__file__).resolve().parents[2] / "exactmem"
# the checker imports only the standard library (it probes its fast paths itself); rich is
# a dependency that progress may do without
OUTSIDE = ("checker/", "progress.py", "optional.py")


def guarded_imports(root: Path) -> list[str]:
    """``try: import X ... except ImportError`` sites under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(OUTSIDE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Try):
                continue
            imports = any(isinstance(n, (ast.Import, ast.ImportFrom)) for b in node.body
                          for n in ast.walk(b))
            catches = any(isinstance(h.type, ast.Name)
                          and h.type.id in ("ImportError", "ModuleNotFoundError")
                          for h in node.handlers)
            if imports and catches:
                out.append(f"{rel}:{node.lineno}")
    return out


def test_no_hand_written_import_guard() -> None:
    assert guarded_imports(ROOT) == []


def test_a_hand_written_guard_is_found(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("try:\n    import onnx\nexcept ImportError:\n    pass\n")
    assert guarded_imports(tmp_path) == ["m.py:1"]


@pytest.mark.parametrize(("package", "install"), [
    ("onnx", "pip install 'exactmem[export]'"), ("matplotlib", "pip install 'exactmem[plot]'"),
    ("transformers", "pip install 'exactmem[trained]'"), ("scipy", "pip install 'exactmem[lp]'"),
    ("distributed", "pip install 'exactmem[dask]'"), ("cvc5", "pip install cvc5")])
def test_one_message_names_what_to_install(package: str, install: str) -> None:
    assert str(missing(package, "doing X")) == (f"doing X needs the '{package}' package, which "
                                                f"is not installed: {install}")


def test_the_job_may_name_the_extra() -> None:
    """torch is in two extras: reading a checkpoint names ``trained``, exporting ``export``."""
    assert str(missing("torch", "reading a checkpoint", extra="trained")) == (
        "reading a checkpoint needs the 'torch' package, which is not installed: "
        "pip install 'exactmem[trained]'")
    assert str(missing("torch", "export")).endswith("pip install 'exactmem[export]'")
    with pytest.raises(MissingDependencyError, match=r"exactmem\[trained\]"):
        require("no_such_pkg_x", "a test", extra="trained")


def test_a_missing_package_is_one_error() -> None:
    with pytest.raises(MissingDependencyError, match="needs the 'no_such_pkg_x' package"):
        require("no_such_pkg_x.sub", "a test")
    with pytest.raises(MissingDependencyError, match="pip install no_such_pkg_x"):
        need("no_such_pkg_x", "a test")
    assert require("json", "a test").__name__ == "json"
