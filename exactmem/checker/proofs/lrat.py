"""LRAT proof checker (standard library only): "this CNF is unsatisfiable".

A strict DIMACS CNF (:mod:`.dimacs`) and a textual LRAT proof, a step per line:
``id l1 .. lk 0 h1 .. hm 0`` adds lemma ``id`` with hints (ids of live clauses);
``id d c1 .. cm 0`` deletes clauses; ``c`` starts a comment.  Standard numbering (lrat-check,
cake_lpr): CNF clause ``k`` is ``k`` (``1..m``), lemma ids exceed ``m`` and increase.
A lemma is checked by unit propagation **along its hints only**: its literals made false,
each hint in order must have all literals false but one (made true) or all false (a
conflict: the lemma follows).  A satisfied hint, one with two open literals or not live,
or hints ending without a conflict reject the proof; negative (RAT) hints are refused.
Linear in the proof's size, nothing searched (docs/proof-checker.md).  Accepted when the
empty lemma is checked (later lines must still be well formed).  Verdicts:
:mod:`exactmem.checker.verdict`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from ..verdict import CheckReport, Rejected, Unusable, failure
from .dimacs import MAX_STEPS, ints, parse_cnf, read_text

MAX_PROOF_BYTES = 1 << 36  # a proof file is streamed line by line, never held whole
MAX_LINE = 1 << 26


def _check_lemma(k: int, lemma: list[int], hints: list[int],
                 clauses: dict[int, tuple[int, ...]]) -> int:
    """Literal visits spent; raises :class:`Rejected` when the hints do not refute the
    lemma's negation."""
    true = {-x for x in lemma}
    if any(-x in true for x in true):
        return 0  # a tautology: always implied
    visits = 0
    for h in hints:
        c = clauses.get(h)
        if c is None:
            raise Rejected(f"proof line {k}: hint {h} is not a live clause")
        visits += len(c)
        unit = 0
        for x in c:
            if x in true:
                raise Rejected(f"proof line {k}: hint {h} is satisfied")
            if -x not in true:
                if unit:
                    raise Rejected(f"proof line {k}: hint {h} has two open literals")
                unit = x
        if not unit:
            return visits  # every literal of the hint is false: a conflict
        true.add(unit)
    raise Rejected(f"proof line {k}: the hints of lemma {' '.join(map(str, lemma[:12]))} 0 "
                    "end without a conflict")


def check_lrat(cnf_text: str, proof_text: str, max_steps: int = MAX_STEPS) -> CheckReport:
    """Check that the LRAT ``proof_text`` refutes ``cnf_text``; never raises on bad input."""
    return _check(cnf_text, lambda: iter(proof_text.splitlines()), max_steps)


def _check(cnf_text: str, lines: Callable[[], Iterator[str]], max_steps: int) -> CheckReport:
    """The check over the proof's lines."""
    try:
        nvars, cnf = parse_cnf(cnf_text)
        clauses = {k: tuple(c) for k, c in enumerate(cnf, 1)}
        last = len(cnf)
        lemmas = deletions = steps = 0
        refuted = False
        for k, line in enumerate(lines(), 1):
            s = line.split()
            if not s or s[0] == "c":
                continue
            if len(s) > 1 and s[1] == "d":
                ids = ints(" ".join(s[2:]), f"proof line {k}")
                if not ids or ids[-1] != 0 or 0 in ids[:-1] or min(ids) < 0:
                    raise Unusable(f"proof line {k}: a deletion is 'ID d IDS 0'")
                if not refuted:
                    for i in ids[:-1]:
                        deletions += clauses.pop(i, None) is not None
                continue
            nums = ints(line, f"proof line {k}")
            if nums.count(0) != 2 or nums[-1] != 0 or len(nums) < 3:
                raise Unusable(f"proof line {k}: a lemma is 'ID LITERALS 0 HINTS 0'")
            cut = nums.index(0)
            ident, lemma, hints = nums[0], nums[1:cut], nums[cut + 1:-1]
            if any(abs(x) > nvars for x in lemma):
                raise Unusable(f"proof line {k}: a literal beyond {nvars} variables")
            if ident <= last:
                raise Unusable(f"proof line {k}: lemma id {ident} does not exceed {last} "
                               f"(the CNF's {len(cnf)} clauses are 1..{len(cnf)}; lemma ids "
                               "increase)")
            if any(h < 0 for h in hints):
                raise Unusable(f"proof line {k}: RAT hints (negative ids) are not supported")
            last = ident
            if refuted:
                continue
            lemmas += 1
            steps += _check_lemma(k, lemma, hints, clauses)
            if steps > max_steps:
                raise Unusable(f"resource limit: more than {max_steps} literal visits")
            clauses[ident] = tuple(lemma)
            refuted = not lemma
        if not refuted:
            raise Rejected("the proof does not derive the empty clause")
        return CheckReport(counts={"lemmas": lemmas, "deletions": deletions, "checked": lemmas})
    except (Rejected, Unusable, MemoryError, RecursionError) as exc:
        return failure(exc)


def _file_lines(path: str) -> Iterator[str]:
    """The lines of an ASCII file, read one at a time (a proof may exceed memory)."""
    try:
        with open(path, "rb") as fh:
            k = 0
            while line := fh.readline(MAX_LINE + 1):
                k += 1
                if len(line) > MAX_LINE:
                    raise Unusable(f"{path}: line {k} is longer than {MAX_LINE} bytes")
                if not line.isascii():
                    raise Unusable(f"{path}: line {k} is not ASCII text")
                yield line.decode("ascii")
    except OSError as exc:
        raise Unusable(f"{path}: {exc}") from None


def check_lrat_files(cnf_path: str, proof_path: str, max_steps: int = MAX_STEPS
                     ) -> CheckReport:
    """Like :func:`check_lrat`; the proof file is streamed (at most ``MAX_PROOF_BYTES``),
    so proofs larger than the DRUP checker's file limit can be checked."""
    try:
        if not stat.S_ISREG(os.stat(proof_path).st_mode):
            raise Unusable(f"{proof_path}: not a regular file")
        if os.path.getsize(proof_path) > MAX_PROOF_BYTES:
            raise Unusable(f"{proof_path}: larger than {MAX_PROOF_BYTES} bytes")
        cnf = read_text(cnf_path)
    except (OSError, Unusable) as exc:
        return CheckReport([str(exc)], unusable=True)
    return _check(cnf, lambda: _file_lines(proof_path), max_steps)
