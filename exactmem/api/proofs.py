"""The proof side of the public API: ``exactmem.check_search`` and ``exactmem.check_proof``
mirror the verbs ``check-search`` and ``check-proof`` (docs/proof-checker.md).  Both return
a :class:`~exactmem.api.result_types.CheckResult` whose ``claim`` says what a verified answer
proves; an unreadable file is an ``unusable`` result, not an exception."""

from __future__ import annotations

import os
from pathlib import Path

from exactmem.api.result_types import CheckResult

PathLike = str | os.PathLike[str]


def _result(exit_code: int, reasons: list[str] | tuple[str, ...], claim: str,
            path: Path | None, notes: tuple[str, ...] = ()) -> CheckResult:
    return CheckResult(exit_code == 0, exit_code == 2, exit_code, tuple(reasons),
                       claim if exit_code == 0 else None, path, notes)


def check_search(path: PathLike, base: PathLike | None = None) -> CheckResult:
    """Check a bit-bounded search answer (``exactmem search --bits ... --json``) as a
    whole: found sizes certified, infeasible sizes' CNFs re-derived from the question and
    refuted by their LRAT proofs.  Files it names are relative to its folder (or ``base``).
    """
    from exactmem.checker.proofs.search_check import check_search_file

    rep = check_search_file(str(path), None if base is None else str(base))
    c = rep.counts
    notes = tuple(rep.lines)
    if rep.claim is not None and rep.exit_code == 0:
        notes += (f"claim: {rep.claim}",)
    notes += (f"{c['found']} found sizes certified, {c['lrat']} LRAT refutations of "
              f"re-derived CNFs checked ({c['nested']} more sizes nest in them), "
              f"{c['label-consistency']} label-consistency refutations, {c['unknown']} "
              "unknown",)
    return _result(rep.exit_code, rep.reasons,
                   rep.claim or "every size of the answer is found or refuted as it states",
                   Path(path), notes)


def check_proof(cnf: PathLike, proof: PathLike, fmt: str = "auto",
                max_steps: int | None = None) -> CheckResult:
    """Check that ``proof`` (LRAT, or DRUP/DRAT: ``fmt`` ``"lrat"``/``"drup"``, or by the
    file suffix) refutes the DIMACS ``cnf`` (within ``max_steps`` propagation steps, by
    default the checker's limit).  A verified result says only that the CNF is
    unsatisfiable, not what it encodes (:func:`check_search` binds that)."""
    from exactmem.checker.proofs.dimacs import MAX_STEPS
    from exactmem.checker.proofs.drup import check_proof_files
    from exactmem.checker.proofs.lrat import check_lrat_files

    if fmt not in ("auto", "lrat", "drup"):
        raise ValueError(f"fmt: expected 'auto', 'lrat' or 'drup', found {fmt!r}")
    check = check_lrat_files if proof_format(str(proof), fmt) == "lrat" else check_proof_files
    rep = check(str(cnf), str(proof), max_steps or MAX_STEPS)
    counts = rep.counts
    notes = ((f"{counts['lemmas']} lemmas checked, {counts['deletions']} deletions applied",)
             if rep.verdict == "s VERIFIED" else ())
    return _result(rep.exit_code, rep.reasons, "this CNF is unsatisfiable", Path(proof),
                   notes)


def proof_format(path: str, fmt: str = "auto") -> str:
    """The proof format of ``path``: ``fmt``, or for ``auto`` lrat for a ``.lrat`` file,
    DRUP/DRAT otherwise."""
    if fmt != "auto":
        return fmt
    return "lrat" if path.endswith(".lrat") else "drup"
