"""One query on plain JSON values, for process pools and Dask.

:func:`query_worker` runs what a payload asks, in order: witness transfer from donor
fronts and random fronts (real weights, :mod:`~exactmem.search.finders.transfer`), a
proposed b-bit network, this process's label sweep
(:mod:`~exactmem.search.finders.label_sweep`), the exhaustive plane walk
(:mod:`~exactmem.search.finders.plane_exhaustive`), then the query itself
(:mod:`~exactmem.search.drive.query`).  Every ``found`` is checker-verified.
"""

from __future__ import annotations

import dataclasses
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset, dataset_from_json
from exactmem.search.drive.query import given_witness, run_bits_query, run_query
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.question.outcome import Found, QueryResult
from exactmem.search.question.shape import Shape
from exactmem.search.solvers.crosscheck import DEFAULT_CVC5_RLIMIT, DEFAULT_ENCODING


def _swept(ds: Dataset, shape: Shape, bits: int, conflicts: int,
           certificate_path: str | Path | None) -> QueryResult | None:
    """A ``found`` answer from this process's label sweep
    (:mod:`~exactmem.search.finders.label_sweep`) once the checker verifies its network; ``None``
    when the sweep does not apply or has no model within ``conflicts``."""
    from exactmem.certificate import spec_to_json
    from exactmem.search.finders import label_sweep

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
    """The exhaustive plane walk (:mod:`~exactmem.search.finders.plane_exhaustive`) where it
    applies (``limit``: its first embeddings only): a ``found`` answer once the checker
    verifies its network, else ``None`` and, when the walk ended without a network, a
    note saying so (its word, not a proof: the SAT query that follows decides a
    refutation)."""
    from exactmem.certificate import spec_to_json
    from exactmem.search.finders import plane_exhaustive

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



def query_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """JSON in, JSON out: ``{"dataset", "shape", "ties", "bound"?, "timeout", "rlimit"?,
    "cvc5_rlimit"?, "encoding"?, "crosscheck"?, "key"?, "certificate"?, "donors"?,
    "transfer_only"?, "pool"?, "bits"?, "conflicts"?, "witness"?, "sweep"?}``.  ``donors``
    (``[shape, network]`` pairs, real weights only) are re-fitted first
    (:mod:`~exactmem.search.finders.transfer`), after the random fronts of ``pool`` (``[count,
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
        from exactmem.search.finders.transfer import donor_specs, transfer

        specs = donor_specs(shape, donors or [])
        if payload.get("pool"):
            from exactmem.search.finders.front_pool import cheap_test_applies
            from exactmem.search.finders.transfer import DEFAULT_MAX_FRONTS, pool_candidates

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
