"""The SAT backend (python-sat, imported lazily): the only module that runs a SAT solver.

:func:`solve` runs CaDiCaL 1.9.5 (``Cadical195``) with LRAT proof logging (the solver's own
``lrat`` option: every lemma with the ids of the clauses that imply it) under a
deterministic **conflict budget** (a rerun gets the same answer on any machine load).  An
UNSAT answer is written as a DIMACS CNF (opened by the comment lines naming its question)
and a textual LRAT proof in **standard numbering** (original clauses ``1..m`` in file
order, lemma ids ``m+1, m+2, ...``: :func:`standard_lrat` renumbers CaDiCaL's ids), and is
reported only after the standard-library checker :mod:`exactmem.checker.proofs.lrat` verified the
pair.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactmem.search.question.outcome import Infeasible, Unknown

SOLVER = "cadical195"
DEFAULT_CONFLICTS = 1_000_000


def _pysat() -> Any:
    from exactmem.optional import require

    return require("pysat.solvers", "--bits")


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
    hashes: tuple[str, str] | None = None  # SHA-256 of the CNF and proof files written


def dimacs(nvars: int, clauses: list[list[int]], header: list[str] | None = None) -> str:
    from exactmem.checker.proofs.search_encode import dimacs as trusted

    return trusted(nvars, clauses, header)


def cadical_ids(count: int, lines: list[str]) -> dict[int, int]:
    """``{CaDiCaL id: k}``: with proof logging on while the clauses are added, CaDiCaL
    gives clause ``k`` (0-based) of the input the ``k``-th smallest positive id that no
    lemma uses (the clauses it derives while reading are numbered in between)."""
    used = set()
    for line in lines:
        s = line.split(maxsplit=2)
        if len(s) > 1 and s[0] != "c" and s[1] != "d" and s[0].isdigit():
            used.add(int(s[0]))
    free = (i for i in range(1, count + len(used) + 1) if i not in used)
    return dict(zip(free, range(count), strict=False))


def standard_lrat(count: int, lrat: str) -> str:
    """CaDiCaL's LRAT proof of ``count`` clauses in standard numbering: clause ``k`` of
    the CNF file is ``k`` (1-based), the lemmas are ``count + 1, count + 2, ...`` in
    order; a deletion line carries the id of the last lemma before it."""
    lines = lrat.splitlines()
    new = {i: k + 1 for i, k in cadical_ids(count, lines).items()}
    last = count
    out: list[str] = []
    for line in lines:
        s = line.split()
        if not s or s[0] == "c":
            continue
        if s[1] == "d":
            out.append(f"{last} d " + " ".join(str(new[int(i)]) for i in s[2:-1]) + " 0")
            continue
        nums = list(map(int, s))
        cut = nums.index(0)
        last += 1
        new[nums[0]] = last
        hints = " ".join(str(new[h] if h > 0 else -new[-h]) for h in nums[cut + 1:-1])
        out.append(" ".join(map(str, [last, *nums[1:cut], 0])) + (f" {hints} 0" if hints
                                                                   else " 0"))
    return "\n".join(out) + "\n"


def lrat_to_drup(clauses: list[list[int]], lrat: str) -> str:
    """The lemmas and deletions of a standard LRAT proof of ``clauses`` as a DRUP proof
    (ids and hints dropped), for DRAT checkers such as drat-trim or dratify."""
    by_id = {k + 1: c for k, c in enumerate(clauses)}
    out: list[str] = []
    for line in lrat.splitlines():
        s = line.split()
        if not s or s[0] == "c":
            continue
        if s[1] == "d":
            out.extend("d " + " ".join(map(str, by_id.pop(int(i)))) + " 0"
                       for i in s[2:-1] if int(i) in by_id)
            continue
        nums = list(map(int, s))
        lemma = nums[1:nums.index(0)]
        by_id[nums[0]] = lemma
        out.append(" ".join(map(str, [*lemma, 0])))
    return "\n".join(out) + "\n"


def _run(clauses: list[list[int]], conflicts: int) -> tuple[bool | None, int, frozenset[int],
                                                             str]:
    """``(answer, conflicts used, model, LRAT text)``: CaDiCaL with its ``lrat`` option set
    before any clause is added; the proof in standard numbering (:func:`standard_lrat`)."""
    import pysolvers

    solvers = _pysat()
    s = solvers.Cadical195()
    try:
        s.configure({"lrat": 1, "binary": 0})
        s.prfile = tempfile.TemporaryFile()
        s.prfp = pysolvers.cadical195_tracepr(s.cadical, s.prfile)
        for c in clauses:
            s.add_clause(c)
        s.conf_budget(conflicts)
        res = s.solve_limited()
        used = int(s.accum_stats().get("conflicts", 0))
        model = frozenset(s.get_model() or ()) if res else frozenset()
        proof = ""
        if res is False:
            pysolvers.flushpr(s.prfp)
            s.prfile.seek(0)
            proof = standard_lrat(len(clauses), s.prfile.read().decode("ascii"))
        return res, used, model, proof
    finally:
        s.delete()


def solve(nvars: int, clauses: list[list[int]], conflicts: int = DEFAULT_CONFLICTS,
          proof_stem: Path | None = None, header: list[str] | None = None) -> SatAnswer:
    """Solve; on UNSAT write ``<stem>.cnf`` (opened by the comment lines ``header``) and
    ``<stem>.lrat`` (when given), with their SHA-256, and check them."""
    from exactmem.checker.proofs.lrat import check_lrat

    res, used, model, proof_text = _run(clauses, conflicts)
    if res is None:
        return SatAnswer(Unknown(f"conflict budget {conflicts} exhausted ({version()})"), used)
    if res:
        return SatAnswer(SatModel(model, used), used)
    cnf_text = dimacs(nvars, clauses, header)
    cnf_path = proof_path = None
    hashes = None
    if proof_stem is not None:
        proof_stem.parent.mkdir(parents=True, exist_ok=True)
        cnf_path, proof_path = str(proof_stem) + ".cnf", str(proof_stem) + ".lrat"
        from exactmem.files.atomic import write_text_atomic

        write_text_atomic(Path(cnf_path), cnf_text)
        write_text_atomic(Path(proof_path), proof_text)
        hashes = (hashlib.sha256(cnf_text.encode()).hexdigest(),
                  hashlib.sha256(proof_text.encode()).hexdigest())
    start = time.monotonic()
    report = check_lrat(cnf_text, proof_text)
    secs = time.monotonic() - start
    if report.verdict != "s VERIFIED":
        return SatAnswer(Unknown(f"{version()} said UNSAT but the proof checker answered "
                                 f"{report.verdict}: {'; '.join(report.reasons)}"),
                         used, cnf_path, proof_path, secs, hashes)
    detail = (f"{version()}: UNSAT after {used} conflicts; LRAT proof of "
              f"{report.counts['lemmas']} lemmas verified by exactmem.checker.proofs.lrat")
    return SatAnswer(Infeasible("lrat", detail), used, cnf_path, proof_path, secs, hashes)


class Incremental:
    """One CaDiCaL 1.9.5 kept across calls, without proof logging, answering under
    assumptions (:mod:`~exactmem.search.finders.label_sweep`): clauses it learns follow from the
    clauses given, so they serve every later call.  Its answers are not trusted: a model
    is a proposal for the checker, and no refutation is taken from it."""

    def __init__(self, clauses: list[list[int]]) -> None:
        self.solver = _pysat().Cadical195(bootstrap_with=clauses)
        self.conflicts = 0

    def solve(self, assumptions: list[int], conflicts: int
              ) -> tuple[bool | None, int, frozenset[int]]:
        """``(answer, conflicts used, model)`` under a conflict budget."""
        self.solver.conf_budget(conflicts)
        res = self.solver.solve_limited(assumptions=assumptions)
        total = int(self.solver.accum_stats().get("conflicts", 0))
        used, self.conflicts = total - self.conflicts, total
        model = frozenset(self.solver.get_model() or ()) if res else frozenset()
        return res, used, model

    def close(self) -> None:
        self.solver.delete()
