"""One search query: does a network of this shape memorize this dataset?

:func:`run_query` checks label consistency (a violation is a checkable proof that no
network of the family exists: it has no positional information), encodes the question
(:mod:`exactmem.search.encoding`), asks the backend, and for a ``found`` answer builds
the witness network, certifies it with :func:`exactmem.certificate.build_certificate` and
re-verifies it with the trusted checker before reporting it.  A witness the checker
rejects is reported as ``unknown``, never as ``found``.

:func:`query_worker` is the same on plain JSON values, for process pools and Dask.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset, dataset_from_json
from exactmem.model.dataset_checks import find_conflicting_duplicate, find_inconsistency
from exactmem.search.crosscheck import (
    DEFAULT_CVC5_RLIMIT,
    DEFAULT_ENCODING,
    Verdicts,
    cvc5_opinion,
    encode_with,
    other_encoding,
    second_opinions,
)
from exactmem.search.encoding import EncodeOptions, output_dim
from exactmem.search.outcome import (
    Assignment,
    BackendOutcome,
    Found,
    Infeasible,
    Outcome,
    Unknown,
)
from exactmem.search.shape import Shape, params_of
from exactmem.search.witness import witness_spec

CONSTRUCTION_NAME = "search"
PORTFOLIO_STAGE_S = 3.0


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The outcome of one query with its JSON-ready summary."""

    shape: Shape
    params: int
    outcome: Outcome
    seconds: float
    certificate: dict[str, Any] | None = None
    certificate_path: str | None = None
    notes: tuple[str, ...] = field(default=())
    cnf: str | None = None  # bit-bounded infeasible: the DIMACS file and its LRAT proof
    proof: str | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())  # e.g. bits, conflicts

    @property
    def status(self) -> str:
        if isinstance(self.outcome, Found):
            return "found"
        return "infeasible" if isinstance(self.outcome, Infeasible) else "unknown"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": self.shape.as_dict(), "params": self.params,
                               "status": self.status, "seconds": round(self.seconds, 4)}
        if isinstance(self.outcome, Infeasible):
            out["proof_kind"] = self.outcome.proof_kind
            out["detail"] = self.outcome.detail
        elif isinstance(self.outcome, Unknown):
            out["reason"] = self.outcome.reason
        if self.certificate_path is not None:
            out["certificate"] = self.certificate_path
        if self.notes:
            out["notes"] = list(self.notes)
        if self.cnf is not None:
            out["cnf"], out["proof"] = self.cnf, self.proof
        out.update(dict(self.extra))
        return out


def consistency_conflict(ds: Dataset) -> str | None:
    """Why no network without positional information can memorize ``ds``, or ``None``."""
    pair = find_conflicting_duplicate(ds)
    if pair is not None:
        return f"sequences {pair[0]} and {pair[1]} are identical with different labels"
    bad = find_inconsistency(ds)
    if bad is not None:
        return (f"sequences {bad[0]} and {bad[1]} are equal up to a permutation with the same "
                f"last token but carry different labels (Kajitsuka & Sato eq. 5)")
    return None


def shape_params(ds: Dataset, shape: Shape) -> int:
    dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert dim is not None
    return params_of(shape, ds.inputs, dim, output_dim(ds, shape))


def certify_witness(ds: Dataset, shape: Shape, spec: Any, opts: EncodeOptions,
                    bits: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """Certificate of the witness and the checker's failures (empty when verified)."""
    from exactmem.certificate import build_certificate
    from exactmem.checker import check_certificate
    from exactmem.constructions.base import BuildResult

    params: dict[str, Any] = {"shape": shape.as_dict(), "ties": opts.ties}
    if bits is not None:
        params["bits"] = bits
    cert = build_certificate(ds, BuildResult(spec, params), CONSTRUCTION_NAME)
    report = check_certificate(cert)
    return cert, list(report.failures)


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

    ``encoding``: ``"positions"`` (:mod:`~exactmem.search.encoding_positions`) or
    ``"multiset"`` (:mod:`~exactmem.search.encoding`).  ``rlimit``: Z3's deterministic
    resource limit per solver call (``timeout_s`` stays as a wall-clock safety net).

    With ``portfolio`` (and exact ties) two restricted problems -- unique winners only,
    then uniform attention -- are tried first (a tenth of ``rlimit`` each, or a few
    seconds without one): Z3 often finds their witnesses much faster, and a witness of a
    restriction is a witness.  Their ``infeasible`` answers are ignored; only the full
    problem can refute.  With ``fallback``, when Z3 gives no answer on the full problem,
    the other encoding's full problem gets the same limit (``decided_by`` in the JSON
    names the encoding that answered).  With ``crosscheck`` a refutation is asked again
    to Z3 on the other encoding and to cvc5 (``cvc5_rlimit``; ``None`` skips it), see
    :mod:`~exactmem.search.crosscheck`.

    With ``thresholds``, where the tail has an exact threshold description
    (:func:`~exactmem.search.encoding_positions.thresholds_apply`), that smaller problem is
    asked first: a model's front gets its tail fitted (:mod:`~exactmem.search.transfer`)
    and checked; a refutation is cross-checked like any other (``proof_kind``
    ``z3-thresholds+...``, ``enc2`` being the positions encoding of the whole network).
    """
    from exactmem.search import z3_backend

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
    from exactmem.search import sat_backend
    from exactmem.search.sat_encoding import encode_bits, witness_from_model

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
    from exactmem.search import z3_backend
    from exactmem.search.encoding_positions import encode_thresholds, thresholds_apply
    from exactmem.search.transfer import transfer

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
    from exactmem.search.witness import pad_witness

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


def _swept(ds: Dataset, shape: Shape, bits: int, conflicts: int,
           certificate_path: str | Path | None) -> QueryResult | None:
    """A ``found`` answer from this process's label sweep
    (:mod:`~exactmem.search.label_sweep`) once the checker verifies its network; ``None``
    when the sweep does not apply or has no model within ``conflicts``."""
    from exactmem.certificate import spec_to_json
    from exactmem.search import label_sweep

    if not label_sweep.applies(ds, shape, bits):
        return None
    spec, used = label_sweep.for_process(ds, shape, bits).network(ds.labels, conflicts)
    if spec is None:
        return None
    return given_witness(ds, shape, spec_to_json(spec), bits,
                         f"label sweep: a model under label assumptions after {used} "
                         f"conflicts (budget {conflicts} per labelling)", certificate_path)


def _plane_walked(ds: Dataset, shape: Shape, bits: int, certificate_path: str | Path | None,
                  limit: int | None = None) -> tuple[QueryResult | None, str | None]:
    """The exhaustive plane walk (:mod:`~exactmem.search.plane_exhaustive`) where it
    applies (``limit``: its first embeddings only): a ``found`` answer once the checker
    verifies its network, else ``None`` and, when the walk ended without a network, a
    note saying so (its word, not a proof: the SAT query that follows decides a
    refutation)."""
    from exactmem.certificate import spec_to_json
    from exactmem.search import plane_exhaustive

    if not plane_exhaustive.applies(ds, shape, bits):
        return None, None
    start = time.monotonic()
    walk = plane_exhaustive.PlaneExhaustive(ds, shape, bits)
    out = walk.search(limit=limit)
    seconds = time.monotonic() - start
    if out.front is None:
        which = f"all {out.total}" if out.embeddings == out.total else \
            f"the first {out.embeddings} of {out.total}"
        return None, (f"exhaustive plane walk: no network with {which} embeddings (up to "
                      f"the dimension swap) and every head and tail ({out.fronts_tested} "
                      f"stream sets tested, {seconds:.1f} s)" +
                      ("; that walk's word, not a proof" if out.embeddings == out.total
                       else ""))
    res = given_witness(ds, shape, spec_to_json(walk.network(out)), bits,
                        f"exhaustive plane walk: embedding {out.embeddings} of the "
                        f"{out.total} walked in order ({seconds:.1f} s)",
                        certificate_path)
    if res is not None:  # the walk's time counts too
        res = dataclasses.replace(res, seconds=time.monotonic() - start)
    return res, None


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


def query_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """JSON in, JSON out: ``{"dataset", "shape", "ties", "bound"?, "timeout", "rlimit"?,
    "cvc5_rlimit"?, "encoding"?, "crosscheck"?, "key"?, "certificate"?, "donors"?,
    "transfer_only"?, "pool"?, "bits"?, "conflicts"?, "witness"?, "sweep"?}``.  ``donors``
    (``[shape, network]`` pairs, real weights only) are re-fitted first
    (:mod:`~exactmem.search.transfer`), after the random fronts of ``pool`` (``[count,
    seed]``) whose streams pass the cheap test; with ``transfer_only`` a failed re-fit
    answers ``{"status": "not transferred"}`` instead of running the query.  With ``bits``,
    a proposed ``witness`` and then (``sweep``: conflicts) this process's label sweep come
    before the labelling's own SAT query.  The answer records the ``timeout`` and
    ``rlimit`` it ran under (a stored ``unknown`` is retried under a larger one)."""

    ds = dataset_from_json(payload["dataset"])
    shape = Shape.from_dict(payload["shape"])
    bound = payload.get("bound")
    opts = EncodeOptions(ties=payload.get("ties", "split"),
                         bound=None if bound is None else Fraction(bound))
    timeout = float(payload.get("timeout", 60.0))
    res: QueryResult | None = None
    donors = payload.get("donors")
    if (donors or payload.get("pool")) and payload.get("bits") is None:
        from exactmem.search.transfer import donor_specs, transfer

        specs = donor_specs(shape, donors or [])
        if payload.get("pool"):
            from exactmem.search.transfer import (
                DEFAULT_MAX_FRONTS,
                cheap_test_applies,
                pool_candidates,
            )

            count, seed = payload["pool"]
            # a front that passes the exact test always gets its tail: a few suffice
            limit = 4 if cheap_test_applies(shape, 2) else DEFAULT_MAX_FRONTS
            specs = pool_candidates(ds, shape, int(count), int(seed), limit=limit) + specs
        res = transfer(ds, shape, specs, opts, timeout_s=timeout,
                       certificate_path=payload.get("certificate"))
        if res is None and payload.get("transfer_only"):
            return {"key": payload.get("key"), "status": "not transferred"}
    if payload.get("witness") is not None and payload.get("bits") is not None:
        res = given_witness(ds, shape, payload["witness"], int(payload["bits"]),
                            payload.get("witness_note", "given"), payload.get("certificate"))
    if res is None and payload.get("bits") is not None and payload.get("sweep"):
        res = _swept(ds, shape, int(payload["bits"]), int(payload["sweep"]),
                     payload.get("certificate"))
    walked: str | None = None
    if res is None and payload.get("bits") is not None and payload.get("exhaustive"):
        cap = payload["exhaustive"]
        res, walked = _plane_walked(ds, shape, int(payload["bits"]), payload.get("certificate"),
                                    None if cap is True else int(cap))
    if res is not None:
        pass
    elif payload.get("bits") is not None:
        stem = payload.get("proof_stem")
        res = run_bits_query(ds, shape, int(payload["bits"]), payload.get("conflicts"),
                             payload.get("certificate"), None if stem is None else Path(stem))
        if walked is not None:
            res = dataclasses.replace(res, notes=res.notes + (walked,))
    else:
        res = run_query(ds, shape, opts, timeout, payload.get("certificate"),
                        rlimit=payload.get("rlimit"),
                        encoding=payload.get("encoding", DEFAULT_ENCODING),
                        crosscheck=bool(payload.get("crosscheck", True)),
                        cvc5_rlimit=payload.get("cvc5_rlimit", DEFAULT_CVC5_RLIMIT))
    out = res.as_dict()
    out["timeout"] = timeout
    if isinstance(res.outcome, Found):
        from exactmem.certificate import spec_to_json

        out["network"] = spec_to_json(res.outcome.witness)
    if "key" in payload:
        out["key"] = payload["key"]
    out["verified"] = res.status == "found"
    return out
