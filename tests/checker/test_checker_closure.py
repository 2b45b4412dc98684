"""What each claim rests on: the import closure of its checker, computed from the source
with ``ast``, must be the table that opens docs/checker.md (modules and line counts).

The closure of a root module: the checker's modules it imports, at module level or inside
a function, transitively, with the package ``__init__`` of every module reached; standard
library modules are not counted, and nothing outside ``exactmem/checker/`` may be reached.
The two dispatch points load a part only when that claim needs it, so their imports are
not followed: the package's ``__getattr__`` and ``verify._check_lm`` (the table of formats:
a language-model certificate's claim lists ``lm/lm_verify.py`` as a root of its own).
Lines are physical lines (``wc -l``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import exactmem.checker

ROOT = Path(exactmem.checker.__file__).resolve().parent
DOC = ROOT.parents[1] / "docs" / "checker.md"
PACKAGE = "exactmem.checker"
DISPATCH = {("exactmem.checker", "__getattr__"), ("exactmem.checker.verify", "_check_lm")}
CLAIMS = {  # claim -> the modules its verdict is computed by
    "network certificate": ("__main__", "verify"),
    "language-model certificate": ("__main__", "verify", "lm.lm_verify"),
    "DRUP refutation": ("proofs.drup",),
    "LRAT refutation": ("proofs.lrat",),
    "search answer": ("proofs.search_check",),
    "verdict line (every claim)": ("entry",),
}


def _path(module: str) -> Path | None:
    rel = module.removeprefix(PACKAGE).lstrip(".").replace(".", "/")
    for p in (ROOT / rel / "__init__.py", ROOT / f"{rel}.py"):
        if p.is_file():
            return p
    return None


def _imports(module: str) -> set[str]:
    path = _path(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (module, node.name) in DISPATCH:
            skip |= {id(n) for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("exactmem") and not name.startswith(PACKAGE):
                raise AssertionError(f"{module} imports {name}: outside the checker")
            if name.startswith(PACKAGE) and _path(name) is not None:
                out.add(name)
    return out


def closure(roots: tuple[str, ...]) -> dict[str, int]:
    """``{path relative to exactmem/checker: lines}`` of the closure of ``roots``."""
    todo = [f"{PACKAGE}.{r}" for r in roots]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:k]) for k in range(2, len(parts))]  # the packages above
        todo += sorted(_imports(m))
    files = {_path(m) for m in seen}
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
            for p in files if p is not None}


def table() -> dict[str, tuple[list[str], int]]:
    """The table of docs/checker.md: ``| claim | modules | lines |``."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.fullmatch(r"\| ([^|]+) \| ([^|]+) \| (\d+) \|", line.strip())
        if m and m[1].strip() in CLAIMS:
            mods = [x.strip().strip("`") for x in m[2].split(",")]
            mods = [re.sub(r" \(\d+\)$", "", x).strip("`") for x in mods]
            rows[m[1].strip()] = (mods, int(m[3]))
    return rows


def render() -> str:
    """The table as it must read (printed by ``python tests/checker/test_checker_closure.py``)."""
    out = ["| claim | modules in its import closure (lines) | lines |", "|---|---|---|"]
    for claim, roots in CLAIMS.items():
        c = closure(roots)
        mods = ", ".join(f"`{k}` ({v})" for k, v in sorted(c.items()))
        out.append(f"| {claim} | {mods} | {sum(c.values())} |")
    return "\n".join(out)


def test_the_table_of_docs_checker_md_is_the_closures() -> None:
    rows = table()
    assert set(rows) == set(CLAIMS), "docs/checker.md: a claim is missing; the table is\n" \
        + render()
    for claim, roots in CLAIMS.items():
        c = closure(roots)
        assert rows[claim] == (sorted(c), sum(c.values())), \
            f"docs/checker.md is stale for {claim!r}; the table is\n{render()}"


def test_the_lrat_verdict_rests_on_under_300_lines() -> None:
    assert sum(closure(CLAIMS["LRAT refutation"]).values()) < 300
    assert "proofs/drup.py" not in closure(CLAIMS["LRAT refutation"])


def test_a_network_certificate_loads_no_language_model_code() -> None:
    assert not any(k.startswith("lm/") for k in closure(CLAIMS["network certificate"]))
    assert any(k.startswith("lm/") for k in closure(CLAIMS["language-model certificate"]))


def test_the_language_model_verdict_lists_its_fast_path() -> None:
    assert "lm/lm_limbs.py" in closure(CLAIMS["language-model certificate"])


def test_the_closure_follows_imports() -> None:
    c = closure(("proofs.lrat",))
    assert {"proofs/lrat.py", "proofs/dimacs.py", "verdict.py", "__init__.py",
            "proofs/__init__.py"} <= set(c)


if __name__ == "__main__":
    print(render())
