"""Every script in scripts/ still runs: its ``exactmem`` imports resolve (read with
``ast``, so imports inside functions count too), ``--help`` exits 0, and the benchmarks
run end to end on tiny inputs.  Nothing here is timed."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
SIBLINGS = {p.stem for p in SCRIPTS}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _exactmem_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every ``from exactmem... import name`` and ``import exactmem...``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "exactmem":
            found += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "exactmem"]
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_exactmem_imports_resolve(path: Path) -> None:
    for module, name in _exactmem_imports(path):
        mod = importlib.import_module(module)
        if name is not None and name != "*" and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError


def test_every_script_answers_help() -> None:
    """All at once (they are independent), each ``--help`` exit 0 with a usage line."""
    procs = {p.name: subprocess.Popen([sys.executable, str(p), "--help"], cwd=ROOT,
                                      env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
             for p in SCRIPTS}
    bad = []
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage" not in out.lower():
            bad.append(f"{name}: exit {proc.returncode}: {err.strip()[-300:]}")
    assert not bad, "\n".join(bad)


def test_bench_regress_tiny() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_regress.py"), "--tiny",
                           "--rows", "ks25-2^14", "search"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GREEN" in proc.stdout and proc.stdout.count(" ok") == 2


@pytest.mark.parametrize("args", [["bench_dense_certify.py", "--exps", "6"],
                                  ["bench_certify.py", "--N", "50", "--dense-max", "50", "-q"]],
                         ids=lambda a: a[0])
def test_benchmarks_tiny(args: list[str], tmp_path: Path) -> None:
    """The certify benchmarks end to end on tiny inputs (scripts/bench_gpt2_tiny.py's imports
    are resolved above; a run imports torch and transformers, seconds more)."""
    extra = ["--work", str(tmp_path)] if args[0] == "bench_dense_certify.py" else []
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / args[0]), *args[1:], *extra],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_bench_shapes_tiny(tmp_path: Path) -> None:
    """scripts/bench_shapes.py end to end on the shrunk LLaMA shape (1 layer, d 32): the
    producer, check and the default certify-model; one row with every position verified."""
    import csv

    out = tmp_path / "shapes.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_shapes.py"),
                           "--shape", "llama-small", "--tiny", "--sequences", "2", "--tokens",
                           "4", "--check", "--default", "--workdir", str(tmp_path),
                           "--out", str(out)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with out.open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["shape"] == "llama-small (tiny)" and row["positions"] == "8"
    assert row["certified"] == row["check_verified"] == row["default_certified"] == "8"
    assert row["check_verdict"] == "s VERIFIED" and float(row["certify_peak_mb"]) > 0
