"""Genuine bit-bounded search answers with their files, for the tests of ``check-search``
and for scripts/fuzz_search_answers.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

GENERATE = ["generate", "--task", "next-token", "--N", "6", "--n", "2", "--vocab", "3",
            "--classes", "2", "--seed", "1", "-o", "d.json"]


def exactmem(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *argv], cwd=folder,
                          capture_output=True, text=True, timeout=600)


def genuine_answer(folder: Path, *search: str) -> dict[str, Any]:
    """``exactmem search d.json --bits ... --proofs P --json`` run in ``folder`` on the
    N = 6 dataset; the answer is written to ``folder/answer.json`` and returned."""
    assert exactmem(folder, *GENERATE).returncode == 0
    proc = exactmem(folder, "search", "d.json", "--proofs", "P", "--json", "--quiet",
                    *search)
    assert proc.returncode in (0, 1), proc.stderr
    (folder / "answer.json").write_text(proc.stdout)
    return json.loads(proc.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rebind(entry: dict[str, Any], folder: Path) -> None:
    """Set an entry's file hashes to its files' (an attacker can always do that)."""
    for key in ("cnf", "proof", "certificate"):
        if key in entry and (folder / entry[key]).is_file():
            entry[f"{key}_sha256"] = sha256(folder / entry[key])


def pigeonhole_files(folder: Path, stem: str = "php") -> tuple[str, str]:
    """An unrelated unsatisfiable CNF (4 pigeons, 3 holes) and a valid standard-LRAT proof
    of it, written to ``folder``; their names."""
    from exactmem.search.solvers.sat_backend import _run, dimacs

    def var(p: int, h: int) -> int:
        return p * 3 + h + 1

    cls = [[var(p, h) for h in range(3)] for p in range(4)]
    cls += [[-var(p, h), -var(q, h)] for h in range(3) for p in range(4)
            for q in range(p + 1, 4)]
    res, _, _, proof = _run(cls, 10 ** 6)
    assert res is False
    (folder / f"{stem}.cnf").write_text(dimacs(12, cls))
    (folder / f"{stem}.lrat").write_text(proof)
    return f"{stem}.cnf", f"{stem}.lrat"
