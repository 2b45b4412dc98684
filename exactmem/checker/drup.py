"""A small DRUP/DRAT proof checker (standard library only): "this CNF is unsatisfiable".

Input: a DIMACS CNF (strict: one ``p cnf V C`` header, exactly ``C`` clauses, literals in
``[-V, V]``, every clause ended by ``0``) and a textual DRAT/DRUP proof: one step per line,
``l1 ... lk 0`` (add a lemma) or ``d l1 ... lk 0`` (delete a clause), ``c`` comments.

Checking is forward: every added lemma must be RUP (assigning its negation and unit
propagating over the current clauses gives a conflict) or, failing that, RAT on its first
literal ``p`` (every resolvent with a clause containing ``-p`` is RUP).  Additions keep
satisfiability and deletions only drop clauses, so reaching the empty clause (added, or
a conflict of unit propagation on the final clauses) proves the CNF unsatisfiable.
Deleting a clause that is absent, a unit clause, or a clause satisfied by top-level unit
propagation is ignored (drat-trim ignores unit and reason deletions too): solvers drop
such clauses while still using the units they imply.  Ignoring a deletion is always sound:
every check is made against our own clause set, whose clauses all follow from the CNF
(or, for RAT, keep it satisfiable).

Verdicts: ``s VERIFIED`` (exit 0), ``s REJECTED`` (exit 1: a lemma fails, or no empty
clause), ``s UNUSABLE`` (exit 2: malformed input or a resource limit; never a crash).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

MAX_BYTES = 1 << 30  # per file
MAX_VARS = 1 << 24
MAX_STEPS = 2_000_000_000  # clause visits during propagation, over the whole check


class Unusable(Exception):
    """Malformed input or a resource limit."""


class _Rejected(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ProofReport:
    verdict: str  # "s VERIFIED" | "s REJECTED" | "s UNUSABLE"
    reasons: tuple[str, ...] = field(default=())
    lemmas: int = 0
    deletions: int = 0

    @property
    def exit_code(self) -> int:
        return {"s VERIFIED": 0, "s REJECTED": 1}.get(self.verdict, 2)


def _ints(line: str, where: str) -> list[int]:
    out = []
    for tok in line.split():
        if not (tok.isascii() and (tok.isdigit() or (tok[0] == "-" and tok[1:].isdigit()))):
            raise Unusable(f"{where}: not an integer: {tok[:20]!r}")
        out.append(int(tok))
    return out


def parse_cnf(text: str) -> tuple[int, list[list[int]]]:
    """``(variables, clauses)`` of a strict DIMACS CNF."""
    nvars = ncls = -1
    clauses: list[list[int]] = []
    cur: list[int] = []
    for k, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] == "c":
            continue
        if s[0] == "p":
            parts = s.split()
            if nvars >= 0 or len(parts) != 4 or parts[1] != "cnf":
                raise Unusable(f"cnf line {k}: expected one header 'p cnf VARS CLAUSES'")
            nvars, ncls = _ints(" ".join(parts[2:]), f"cnf line {k}")
            if not (0 <= nvars <= MAX_VARS and ncls >= 0):
                raise Unusable(f"cnf line {k}: header out of range")
            continue
        if nvars < 0:
            raise Unusable(f"cnf line {k}: clause before the 'p cnf' header")
        for lit in _ints(s, f"cnf line {k}"):
            if lit == 0:
                clauses.append(cur)
                cur = []
            elif abs(lit) > nvars:
                raise Unusable(f"cnf line {k}: literal {lit} beyond {nvars} variables")
            else:
                cur.append(lit)
    if nvars < 0:
        raise Unusable("cnf: no 'p cnf' header")
    if cur:
        raise Unusable("cnf: last clause not ended by 0")
    if len(clauses) != ncls:
        raise Unusable(f"cnf: header says {ncls} clauses, found {len(clauses)}")
    return nvars, clauses


class _Checker:
    """Clauses with two watched literals and a persistent top-level assignment (the
    literals unit propagation implies).  Deletions of clauses that are satisfied at the
    top level are ignored, so the top-level assignment never shrinks."""

    def __init__(self, nvars: int, max_steps: int) -> None:
        self.nvars = nvars
        self.val = [0] * (nvars + 1)  # value of the positive literal: 1, -1 or 0
        self.trail: list[int] = []  # true literals; the top level, then a check's own
        self.clauses: list[list[int] | None] = []
        self.watch: dict[int, list[int]] = {}
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.empty = False  # the empty clause follows by unit propagation
        self.steps, self.max_steps = 0, max_steps

    def grow(self, lits: list[int]) -> None:
        top = max((abs(x) for x in lits), default=0)
        if top > MAX_VARS:
            raise Unusable(f"variable {top} beyond the limit {MAX_VARS}")
        if top > self.nvars:
            self.val.extend([0] * (top - self.nvars))
            self.nvars = top

    def _value(self, lit: int) -> int:
        v = self.val[abs(lit)]
        return v if lit > 0 else -v

    def _assign(self, lit: int) -> None:
        self.val[abs(lit)] = 1 if lit > 0 else -1
        self.trail.append(lit)

    def add(self, lits: list[int]) -> None:
        c = sorted(dict.fromkeys(lits), key=lambda x: -self._value(x))  # true, open, false
        open_ = [x for x in c if self._value(x) >= 0]
        if not open_:
            self.empty = True
            return
        ci = len(self.clauses)
        self.clauses.append(c)
        self.index.setdefault(tuple(sorted(c)), []).append(ci)
        if len(c) > 1:
            self.watch.setdefault(c[0], []).append(ci)
            self.watch.setdefault(c[1], []).append(ci)
        if len(open_) == 1 and self._value(c[0]) == 0:  # unit at the top level
            start = len(self.trail)
            self._assign(c[0])
            if self._propagate(start):
                self.empty = True

    def delete(self, lits: list[int]) -> bool:
        """Delete a clause, unless it is absent, a unit, or satisfied at the top level
        (solvers drop those while still using the units they imply)."""
        hits = self.index.get(tuple(sorted(set(lits))))
        if not hits or len(set(lits)) <= 1 or any(self._value(x) > 0 for x in lits):
            return False
        self.clauses[hits.pop()] = None  # watch lists drop it lazily
        return True

    def rup(self, lemma: list[int]) -> bool:
        """Does unit propagation from the negation of ``lemma`` reach a conflict?"""
        mark = len(self.trail)
        try:
            for lit in lemma:
                v = self._value(lit)
                if v > 0:
                    return True  # already implied (or a tautology)
                if v == 0:
                    self._assign(-lit)
            return self._propagate(mark)
        finally:
            for lit in self.trail[mark:]:
                self.val[abs(lit)] = 0
            del self.trail[mark:]

    def _propagate(self, start: int) -> bool:
        val, clauses, watch, trail = self.val, self.clauses, self.watch, self.trail
        i = start
        while i < len(trail):
            false = -trail[i]
            i += 1
            wl = watch.get(false)
            if not wl:
                continue
            self.steps += len(wl)
            if self.steps > self.max_steps:
                raise Unusable(f"resource limit: more than {self.max_steps} propagation steps")
            keep = 0
            j = 0
            while j < len(wl):
                ci = wl[j]
                j += 1
                c = clauses[ci]
                if c is None:
                    continue
                if c[0] == false:
                    c[0], c[1] = c[1], c[0]
                first = c[0]
                fv = val[abs(first)] if first > 0 else -val[abs(first)]
                if fv > 0:
                    wl[keep] = ci
                    keep += 1
                    continue
                for m in range(2, len(c)):
                    x = c[m]
                    if (val[abs(x)] if x > 0 else -val[abs(x)]) >= 0:
                        c[1], c[m] = x, false
                        watch.setdefault(x, []).append(ci)
                        break
                else:
                    wl[keep] = ci
                    keep += 1
                    if fv < 0:  # conflict
                        while j < len(wl):
                            wl[keep] = wl[j]
                            keep += 1
                            j += 1
                        del wl[keep:]
                        return True
                    val[abs(first)] = 1 if first > 0 else -1
                    trail.append(first)
            del wl[keep:]
        return False

    def rat(self, lemma: list[int]) -> bool:
        if not lemma:
            return False
        pivot = lemma[0]
        for c in self.clauses:
            if c is None or -pivot not in c:
                continue
            resolvent = lemma + [x for x in c if x != -pivot]
            if not self.rup(resolvent):
                return False
        return True


def check_proof(cnf_text: str, proof_text: str, max_steps: int = MAX_STEPS) -> ProofReport:
    """Check that ``proof_text`` refutes ``cnf_text``; never raises on bad input."""
    try:
        nvars, clauses = parse_cnf(cnf_text)
        ck = _Checker(nvars, max_steps)
        for c in clauses:
            ck.add(c)
        lemmas = deletions = 0
        for k, line in enumerate(proof_text.splitlines(), 1):
            s = line.strip()
            if not s or s[0] == "c":
                continue
            delete = s[0] == "d"
            lits = _ints(s[1:] if delete else s, f"proof line {k}")
            if not lits or lits[-1] != 0 or 0 in lits[:-1]:
                raise Unusable(f"proof line {k}: a step is literals ended by one 0")
            lits = lits[:-1]
            ck.grow(lits)
            if ck.empty:
                break
            if delete:
                deletions += ck.delete(lits)
                if ck.empty:
                    break
                continue
            lemmas += 1
            if not (ck.rup(lits) or ck.rat(lits)):
                raise _Rejected(f"proof line {k}: lemma {' '.join(map(str, lits[:12]))}"
                                f"{' ...' if len(lits) > 12 else ''} 0 is neither RUP nor RAT")
            ck.add(lits)
        if not ck.empty:
            raise _Rejected("the proof does not derive the empty clause")
        return ProofReport("s VERIFIED", (), lemmas, deletions)
    except _Rejected as exc:
        return ProofReport("s REJECTED", (str(exc),))
    except Unusable as exc:
        return ProofReport("s UNUSABLE", (str(exc),))
    except (MemoryError, RecursionError) as exc:
        return ProofReport("s UNUSABLE", (f"resource limit: {type(exc).__name__}",))


def _read(path: str) -> str:
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise Unusable(f"{path}: not a regular file")
    if os.path.getsize(path) > MAX_BYTES:
        raise Unusable(f"{path}: larger than {MAX_BYTES} bytes")
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise Unusable(f"{path}: not an ASCII text file (binary DRAT is not supported)") \
            from None
    return text


def check_proof_files(cnf_path: str, proof_path: str, max_steps: int = MAX_STEPS
                      ) -> ProofReport:
    try:
        cnf, proof = _read(cnf_path), _read(proof_path)
    except (OSError, Unusable) as exc:
        return ProofReport("s UNUSABLE", (str(exc),))
    return check_proof(cnf, proof, max_steps)
