"""The SAT backend (python-sat, imported lazily): the only module that runs a SAT solver.

:func:`solve` runs CaDiCaL 1.5.3 (``Cadical153``) with DRUP proof logging under a
deterministic **conflict budget** (a rerun gets the same answer on any machine load).  An
UNSAT answer is written as a DIMACS CNF and a textual DRUP proof, and is reported only
after the standard-library checker :mod:`exactmem.checker.drup` verified the pair.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactmem.errors import MissingDependencyError
from exactmem.search.outcome import Infeasible, Unknown

SOLVER = "cadical153"
DEFAULT_CONFLICTS = 200_000


def _pysat() -> Any:
    try:
        from pysat import solvers
    except ImportError as exc:  # pragma: no cover - python-sat is a dependency
        raise MissingDependencyError("--bits needs python-sat: pip install python-sat") \
            from exc
    return solvers


def version() -> str:
    import pysat

    return f"python-sat {pysat.__version__} {SOLVER}"


@dataclass(frozen=True, slots=True)
class SatModel:
    true_literals: frozenset[int]
    conflicts: int


@dataclass(frozen=True, slots=True)
class SatAnswer:
    outcome: SatModel | Infeasible | Unknown
    conflicts: int
    cnf: str | None = None
    proof: str | None = None
    check_seconds: float = 0.0


def dimacs(nvars: int, clauses: list[list[int]]) -> str:
    lines = [f"p cnf {nvars} {len(clauses)}"]
    lines.extend(" ".join(map(str, c)) + " 0" for c in clauses)
    return "\n".join(lines) + "\n"


def solve(nvars: int, clauses: list[list[int]], conflicts: int = DEFAULT_CONFLICTS,
          proof_stem: Path | None = None) -> SatAnswer:
    """Solve; on UNSAT write ``<stem>.cnf`` / ``<stem>.drup`` (when given) and check them."""
    from exactmem.checker.drup import check_proof

    solvers = _pysat()
    with solvers.Solver(name=SOLVER, bootstrap_with=clauses, with_proof=True) as s:
        s.conf_budget(conflicts)
        res = s.solve_limited()
        used = int(s.accum_stats().get("conflicts", 0))
        if res is None:
            return SatAnswer(Unknown(f"conflict budget {conflicts} exhausted ({version()})"),
                             used)
        if res:
            return SatAnswer(SatModel(frozenset(s.get_model()), used), used)
        proof_lines = s.get_proof()
    cnf_text = dimacs(nvars, clauses)
    proof_text = "\n".join(proof_lines) + "\n"
    cnf_path = proof_path = None
    if proof_stem is not None:
        proof_stem.parent.mkdir(parents=True, exist_ok=True)
        cnf_path, proof_path = str(proof_stem) + ".cnf", str(proof_stem) + ".drup"
        Path(cnf_path).write_text(cnf_text)
        Path(proof_path).write_text(proof_text)
    start = time.monotonic()
    report = check_proof(cnf_text, proof_text)
    secs = time.monotonic() - start
    if report.verdict != "s VERIFIED":
        return SatAnswer(Unknown(f"{version()} said UNSAT but the proof checker answered "
                                 f"{report.verdict}: {'; '.join(report.reasons)}"),
                         used, cnf_path, proof_path, secs)
    detail = (f"{version()}: UNSAT after {used} conflicts; DRUP proof of {report.lemmas} "
              f"lemmas verified by exactmem.checker.drup")
    return SatAnswer(Infeasible("drup", detail), used, cnf_path, proof_path, secs)
