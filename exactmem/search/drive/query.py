"""One search query: does a network of this shape memorize this dataset?

:func:`run_query` (real weights) checks label consistency (a violation is a checkable proof
that no network of the family exists: it has no positional information), encodes the
question (:mod:`exactmem.search.encode`), asks the solvers (:mod:`exactmem.search.solvers`),
and for a ``found`` answer builds the witness network, certifies it with
:func:`exactmem.certificate.build_certificate` and re-verifies it with the trusted checker
before reporting it.  A witness the checker rejects is reported as ``unknown``, never as
``found``.  :func:`run_bits_query` is the same for b-bit weights (SAT, LRAT proofs);
:func:`padded_result` and :func:`given_witness` certify networks proposed from elsewhere.

:func:`~exactmem.search.drive.worker.query_worker` is the same on plain JSON values, for
process pools and Dask.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.encode.witness import witness_spec
from exactmem.search.question.outcome import (
    Assignment,
    BackendOutcome,
    Found,
    Infeasible,
    QueryResult,
    Unknown,
    certify_witness,
    consistency_conflict,
    shape_params,
)
from exactmem.search.question.shape import Shape
from exactmem.search.solvers.crosscheck import (
    DEFAULT_CVC5_RLIMIT,
    DEFAULT_ENCODING,
    Verdicts,
    cvc5_opinion,
    encode_with,
    other_encoding,
    second_opinions,
)

PORTFOLIO_STAGE_S = 3.0


def _write(cert: dict[str, Any], certificate_path: str | Path | None) -> str | None:
    """Write a verified witness's certificate where asked; its path, or ``None``."""
    if certificate_path is None:
        return None
    from exactmem.certificate import write_certificate

    write_certificate(cert, certificate_path)
    return str(certificate_path)


def run_query(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None,
              timeout_s: float = 60.0, certificate_path: str | Path | None = None,
              seed: int = 0, portfolio: bool = True,
              rlimit: int | None = None, encoding: str = DEFAULT_ENCODING,
              crosscheck: bool = True,
              cvc5_rlimit: int | None = DEFAULT_CVC5_RLIMIT,
              fallback: bool = True, thresholds: bool = True) -> QueryResult:
    """Decide whether ``shape`` memorizes ``ds``; every ``found`` is checker-verified.

    ``encoding``: ``"positions"`` (:mod:`~exactmem.search.encode.encoding_positions`) or
    ``"multiset"`` (:mod:`~exactmem.search.encode.encoding`).  ``rlimit``: Z3's deterministic
    resource limit per solver call (``timeout_s`` stays as a wall-clock safety net).

    With ``portfolio`` (and exact ties) two restricted problems -- unique winners only,
    then uniform attention -- are tried first (a tenth of ``rlimit`` each, or a few
    seconds without one): Z3 often finds their witnesses much faster, and a witness of a
    restriction is a witness.  Their ``infeasible`` answers are ignored; only the full
    problem can refute.  With ``fallback``, when Z3 gives no answer on the full problem,
    the other encoding's full problem gets the same limit (``decided_by`` in the JSON
    names the encoding that answered).  With ``crosscheck`` a refutation is asked again
    to Z3 on the other encoding and to cvc5 (``cvc5_rlimit``; ``None`` skips it), see
    :mod:`~exactmem.search.solvers.crosscheck`.

    With ``thresholds``, where the tail has an exact threshold description
    (:func:`~exactmem.search.encode.encoding_positions.thresholds_apply`), that smaller problem is
    asked first: a model's front gets its tail fitted (:mod:`~exactmem.search.finders.transfer`)
    and checked; a refutation is cross-checked like any other (``proof_kind``
    ``z3-thresholds+...``, ``enc2`` being the positions encoding of the whole network).
    """
    from exactmem.search.solvers import z3_backend

    opts = opts or EncodeOptions()
    start = time.monotonic()
    params = shape_params(ds, shape)
    budgets: tuple[tuple[str, Any], ...] = (("encoding", encoding), ("rlimit", rlimit))
    conflict = consistency_conflict(ds)
    if conflict is not None:
        return QueryResult(shape, params, Infeasible("label-consistency", conflict),
                           time.monotonic() - start, extra=budgets)
    notes: list[str] = []
    if thresholds:
        early = _threshold_stage(ds, shape, opts, timeout_s, rlimit, crosscheck, cvc5_rlimit,
                                 certificate_path, start, params, budgets)
        if early is not None:
            return early
    raw: BackendOutcome = Unknown("no stage ran")
    for stage, label in _stages(opts, portfolio):
        left = timeout_s - (time.monotonic() - start)
        if rlimit is not None:  # deterministic: stages are bounded by resource counts
            budget, limit = left, rlimit if label is None else max(1, rlimit // 10)
        else:
            budget = left if label is None else min(PORTFOLIO_STAGE_S, timeout_s / 4, left)
            limit = None
        # the restricted stages use the multiset encoding: measured, it finds witnesses
        # under the unique-winner restriction far faster (docs/search.md)
        problem = encode_with(encoding if label is None else "multiset", ds, shape, stage)
        raw = z3_backend.solve(problem, max(budget, 0.001), seed=seed, rlimit=limit)
        if isinstance(raw, Assignment):
            if label is not None:
                notes.append(f"found under the {label} restriction")
            break
    decided_by = encoding
    left = timeout_s - (time.monotonic() - start)
    if isinstance(raw, Unknown) and fallback and left > 0:
        other = other_encoding(encoding)
        second = encode_with(other, ds, shape, opts)
        alt = z3_backend.solve(second, left, seed=seed, rlimit=rlimit)
        if not isinstance(alt, Unknown):
            raw, problem, decided_by = alt, second, other
    budgets += (("decided_by", decided_by),)
    if isinstance(raw, Infeasible) and crosscheck:
        left = timeout_s - (time.monotonic() - start)
        if decided_by == encoding:
            verdicts = second_opinions(ds, shape, opts, encoding, problem, left, rlimit,
                                       cvc5_rlimit, seed)
        else:  # Z3 on the first encoding already gave no answer under the same limit
            verdicts = Verdicts("unknown", cvc5_opinion(problem, cvc5_rlimit))
        budgets += (("cvc5_rlimit", cvc5_rlimit), ("crosscheck", verdicts.as_dict()))
        return QueryResult(shape, params, verdicts.outcome(raw), time.monotonic() - start,
                           extra=budgets)
    if not isinstance(raw, Assignment):
        return QueryResult(shape, params, raw, time.monotonic() - start, extra=budgets)
    spec = witness_spec(ds, shape, problem, raw.values, opts.fixed_embed)
    cert, failures = certify_witness(ds, shape, spec, opts)
    seconds = time.monotonic() - start
    if raw.rational_resolve:
        notes.append("z3 gave an algebraic model; re-solved with rational weights")
    if failures:
        return QueryResult(shape, params, Unknown("the checker rejected the solver's witness: "
                                                  + "; ".join(failures[:3])), seconds,
                           extra=budgets)
    path = _write(cert, certificate_path)
    return QueryResult(shape, params, Found(spec), seconds, cert, path, tuple(notes),
                       extra=budgets)


def run_bits_query(ds: Dataset, shape: Shape, bits: int, conflicts: int | None = None,
                   certificate_path: str | Path | None = None,
                   proof_stem: Path | None = None,
                   fixed_embed: list[list[int]] | None = None) -> QueryResult:
    """Decide whether ``shape`` with ``bits``-bit integer weights memorizes ``ds`` (SAT).

    ``found``: the model's network, certified and verified by the checker.  ``infeasible``:
    label consistency, or an LRAT refutation verified by :mod:`exactmem.checker.proofs.lrat`
    (written to ``<proof_stem>.cnf`` / ``.lrat`` when ``proof_stem`` is given).
    """
    from exactmem.search.encode.sat_encoding import encode_bits, witness_from_model
    from exactmem.search.solvers import sat_backend

    start = time.monotonic()
    params = shape_params(ds, shape)
    budget = conflicts or sat_backend.DEFAULT_CONFLICTS
    extra: tuple[tuple[str, Any], ...] = (("bits", bits), ("conflict_budget", budget))
    conflict = consistency_conflict(ds)
    if conflict is not None:
        return QueryResult(shape, params, Infeasible("label-consistency", conflict),
                           time.monotonic() - start, extra=extra)
    problem = encode_bits(ds, shape, bits, fixed_embed)
    ans = sat_backend.solve(problem.circuit.nvars, problem.clauses, budget, proof_stem,
                            problem.header)
    extra += (("conflicts", ans.conflicts), ("variables", problem.circuit.nvars),
              ("clauses", len(problem.clauses)))
    if not isinstance(ans.outcome, sat_backend.SatModel):
        if ans.hashes is not None:
            extra += (("cnf_sha256", ans.hashes[0]), ("proof_sha256", ans.hashes[1]),
                      ("question", cnf_question(fixed_embed)))
        return QueryResult(shape, params, ans.outcome, time.monotonic() - start,
                           cnf=ans.cnf, proof=ans.proof,
                           extra=extra + (("proof_check_seconds", round(ans.check_seconds,
                                                                         4)),))
    spec = witness_from_model(ds, shape, problem, set(ans.outcome.true_literals), fixed_embed)
    cert, failures = certify_witness(ds, shape, spec, EncodeOptions(), bits)
    seconds = time.monotonic() - start
    if failures:
        return QueryResult(shape, params, Unknown("the checker rejected the SAT witness: "
                                                  + "; ".join(failures[:3])), seconds,
                           extra=extra)
    path = _write(cert, certificate_path)
    if path is not None:
        extra += (("certificate_sha256", file_sha256(path)),)
    return QueryResult(shape, params, Found(spec), seconds, cert, path, extra=extra)


def cnf_question(fixed_embed: list[list[int]] | None = None) -> dict[str, Any]:
    """The encoding options a written CNF was built with (``exactmem check-search``
    re-derives the CNF from them, the dataset, the shape and the bits)."""
    from exactmem.checker.proofs.search_encode import ENCODER

    return {"encoder": ENCODER, "symmetry": True, "segments": True,
            "fixed_embed": fixed_embed}


def file_sha256(path: str | Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def bits_answer(ds: Dataset, sizes: list[dict[str, Any]],
                results: dict[int, QueryResult]) -> dict[str, Any]:
    """What a bit-bounded answer adds so that ``exactmem check-search`` can re-check it on
    its own: the dataset (embedded, with its SHA-256) and, for each found size whose
    certificate was not written to a file, the certificate (``certificate_data``).
    ``results``: the query result of each entry of ``sizes`` that ran (by index)."""
    for k, res in results.items():
        if res.status == "found" and res.certificate_path is None \
                and res.certificate is not None:
            sizes[k]["certificate_data"] = res.certificate
    return {"dataset": {"data": ds.to_json(), "sha256": ds.sha256()}}


def _threshold_stage(ds: Dataset, shape: Shape, opts: EncodeOptions, timeout_s: float,
                     rlimit: int | None, crosscheck: bool, cvc5_rlimit: int | None,
                     certificate_path: str | Path | None, start: float, params: int,
                     budgets: tuple[tuple[str, Any], ...]) -> QueryResult | None:
    """The threshold-tail problem: a certified witness, a cross-checked refutation, or
    ``None`` (not applicable, no answer, or a front whose tail fit failed)."""
    from exactmem.search.encode.encoding_positions import encode_thresholds, thresholds_apply
    from exactmem.search.finders.transfer import transfer
    from exactmem.search.solvers import z3_backend

    if not thresholds_apply(ds, shape, opts):
        return None
    problem = encode_thresholds(ds, shape, opts)
    raw = z3_backend.solve(problem, max(0.001, timeout_s - (time.monotonic() - start)),
                           rlimit=rlimit)
    budgets += (("decided_by", "thresholds"),)
    if isinstance(raw, Infeasible):
        if not crosscheck:
            return QueryResult(shape, params, Infeasible("z3-thresholds", raw.detail),
                               time.monotonic() - start, extra=budgets)
        left = timeout_s - (time.monotonic() - start)
        verdicts = second_opinions(ds, shape, opts, "multiset", problem, left, rlimit,
                                   cvc5_rlimit)
        return QueryResult(shape, params, verdicts.outcome(raw, "z3-thresholds"),
                           time.monotonic() - start,
                           extra=budgets + (("cvc5_rlimit", cvc5_rlimit),
                                            ("crosscheck", verdicts.as_dict())))
    if not isinstance(raw, Assignment):
        return None
    front = witness_spec(ds, shape, problem, raw.values, opts.fixed_embed)
    left = max(0.001, timeout_s - (time.monotonic() - start))
    moved = transfer(ds, shape, [front], opts, timeout_s=left,
                     certificate_path=certificate_path)
    if moved is None:
        return None
    return dataclasses.replace(moved, seconds=time.monotonic() - start, extra=budgets,
                               notes=("front from the threshold-tail problem, tail fitted",))


def _stages(opts: EncodeOptions, portfolio: bool) -> list[tuple[EncodeOptions, str | None]]:
    """Restricted problems first (each can only find, never refute), the full one last."""
    if not portfolio or opts.ties == "margin" or opts.uniform:
        return [(opts, None)]
    return [(dataclasses.replace(opts, ties="margin"), "unique-winner (margin)"),
            (dataclasses.replace(opts, uniform=True), "uniform-attention"),
            (opts, None)]


def padded_result(ds: Dataset, small: Shape, network: dict[str, Any], big: Shape,
                  opts: EncodeOptions) -> QueryResult | None:
    """A ``found`` answer for ``big`` from a witness of a nested smaller shape, certified."""
    from exactmem.certificate import spec_from_json
    from exactmem.search.encode.witness import pad_witness

    start = time.monotonic()
    spec = pad_witness(spec_from_json(network), small, big)
    cert, failures = certify_witness(ds, big, spec, opts)
    if failures:
        return None
    return QueryResult(big, shape_params(ds, big), Found(spec), time.monotonic() - start, cert,
                       notes=(f"zero-padded from the witness of {small.label()}",))


def given_witness(ds: Dataset, shape: Shape, network: dict[str, Any], bits: int, note: str,
                  certificate_path: str | Path | None = None) -> QueryResult | None:
    """A ``found`` answer from a proposed b-bit network (e.g. the grid enumeration's) once
    the checker verifies it; ``None`` when it is off the grid or rejected."""
    from exactmem.certificate import spec_from_json

    start = time.monotonic()
    top = 2 ** (bits - 1)
    if any(not (v.denominator == 1 and -top <= v < top) for v in _numbers(network["layers"])):
        return None
    spec = spec_from_json(network)
    cert, failures = certify_witness(ds, shape, spec, EncodeOptions(), bits)
    if failures:
        return None
    path = _write(cert, certificate_path)
    return QueryResult(shape, shape_params(ds, shape), Found(spec), time.monotonic() - start,
                       cert, path, notes=(note,), extra=(("bits", bits),))



def _numbers(obj: Any) -> Iterator[Fraction]:
    """Every weight of a network's JSON layers (numbers are strings there)."""
    if isinstance(obj, str):
        try:
            yield Fraction(obj)
        except ValueError:
            return
    elif isinstance(obj, list):
        for x in obj:
            yield from _numbers(x)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            if k not in ("type", "kind"):
                yield from _numbers(x)
