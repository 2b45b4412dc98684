"""``certify-model --shards K [--scheduler ADDRESS]``: a language model's two long stages --
the producer's proof of the positions and the in-process checker -- run on slices of the
sequences in parallel, in local processes or on a Dask cluster, with the verdict and counts
of one process (docs/trained-models.md, "Sharded runs").

Why the answer is that of one pass:

* producer: every sequence is proved on its own.  The slices are whole batches of
  ``batch_for`` sequences (the batches one process makes), and with ``producer="auto"`` the
  block where float64 takes over is chosen once, on the first sequences of the whole dataset
  (:func:`~exactmem.lm.split.choose_switch`), and handed to every slice;
* checker: :func:`exactmem.checker.lm.lm_verify.check` on ``shard=(k, K)`` of the same
  certificate; its totals are exact integers and rationals, and
  :func:`~exactmem.checker.lm.lm_verify.merge` adds them up into the claim of one pass
  (as ``exactmem check --shards`` does).

A remote worker needs exactmem installed and, for a certificate that binds its weights, the
weights file at the same path (a shared file system).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Submit = Callable[..., Future[Any]]
Progress = Callable[[str, int, int], None]


def slices(count: int, shards: int, batch: int) -> list[tuple[int, int]]:
    """At most ``shards`` contiguous ``(start, stop)`` ranges covering ``count`` sequences,
    each a whole number of ``batch``-sized batches (the last may be shorter)."""
    if shards < 1:
        raise ValueError(f"shards: expected a positive number, found {shards}")
    batches = -(-count // batch)
    k = max(1, min(shards, batches))
    cuts = [i * batches // k * batch for i in range(k)] + [count]
    return [(a, min(b, count)) for a, b in zip(cuts, cuts[1:], strict=False) if a < b]


@contextmanager
def executor(shards: int, scheduler: str | None) -> Iterator[Submit]:
    """``submit(function, *args) -> future``: a Dask client's on ``scheduler``, else a pool of
    at most ``min(shards, CPUs)`` local processes (closed on exit)."""
    if scheduler:
        from exactmem.api.support import dask_submit

        with dask_submit(scheduler) as submit:
            yield submit
        return
    import os

    with ProcessPoolExecutor(max_workers=max(1, min(shards, os.cpu_count() or 1))) as pool:
        yield pool.submit


def _prove_slice(spec: Any, sequences: list[list[int]], labels: list[list[int]],
                 producer: str, switch: int | None, float_margins: np.ndarray | None,
                 coded: bool) -> tuple[Any, list[Any]]:
    """One slice's :class:`~exactmem.lm.positions.PositionBounds` and code-length upper
    bounds (when ``coded``)."""
    from exactmem.lm.codelength import code_length_upper
    from exactmem.lm.positions import prove_positions

    lengths: list[Any] = []

    def on_logits(i: int, lo: np.ndarray, hi: np.ndarray) -> None:
        lengths.append(code_length_upper(lo, hi, labels[i]))

    from exactmem.lm.batching import batch_for

    bounds = prove_positions(spec, sequences, labels, None, batch_for(spec, len(sequences[0])),
                             on_logits if coded else None, producer, switch, float_margins)
    return bounds, lengths


def prove_sharded(spec: Any, sequences: Sequence[Sequence[int]],
                  labels: Sequence[Sequence[int]], producer: str,
                  float_margins: np.ndarray | None, coded: bool, shards: int, submit: Submit,
                  progress: Progress | None = None) -> tuple[Any, list[Any]]:
    """:func:`~exactmem.lm.positions.prove_positions` over :func:`slices`, joined: the
    bounds of one pass and the code-length upper bounds in sequence order."""
    from exactmem.lm.positions import PositionBounds

    switch = None
    if producer == "auto":
        from exactmem.lm.normballs import NormWeights
        from exactmem.lm.split import choose_switch

        switch = choose_switch(NormWeights(spec), sequences, labels, float_margins)
    from exactmem.lm.batching import batch_for

    parts = slices(len(sequences), shards, batch_for(spec, len(sequences[0])))
    futures = [submit(_prove_slice, spec, [list(s) for s in sequences[a:b]],
                      [list(y) for y in labels[a:b]], producer, switch,
                      None if float_margins is None else float_margins[a:b], coded)
               for a, b in parts]
    proved: list[tuple[int, ...]] = []
    failed: list[tuple[tuple[int, float], ...]] = []
    lengths: list[Any] = []
    rerun = bits = 0
    for (_, b), fut in zip(parts, futures, strict=True):
        got, more = fut.result()
        proved += got.proved
        failed += got.failed
        lengths += more
        rerun += got.rerun
        bits = max(bits, got.arb_bits)
        if progress is not None:
            progress("bounds", b, len(sequences))
    return PositionBounds(tuple(proved), tuple(failed), switch, rerun, bits), lengths


@dataclass
class SlicedCheck:
    """What :func:`exactmem.checker.lm.lm_verify.check` returns and fills in, for the
    union of the slices."""

    bad: list[str] = field(default_factory=list)
    unusable: bool = False
    claim: str | None = None
    unproved: list[tuple[int, int]] = field(default_factory=list)
    derived: dict[int, int] = field(default_factory=dict)
    ref_derived: dict[int, tuple[int, int]] = field(default_factory=dict)
    exec_unproved: list[tuple[int, int]] = field(default_factory=list)
    exec_derived: dict[int, int] = field(default_factory=dict)


def _check_slice(cert: dict[str, Any], base: str, shard: tuple[int, int],
                 weights: str | None) -> tuple[SlicedCheck, dict[str, Any]]:
    from exactmem.checker.lm.lm_verify import check

    out = SlicedCheck()
    totals: dict[str, Any] = {}
    out.bad, out.unusable, out.claim = check(
        cert, Path(base), None, shard, unproved=out.unproved, derived=out.derived,
        totals=totals, ref_derived=out.ref_derived, exec_unproved=out.exec_unproved,
        weights=None if weights is None else Path(weights), exec_derived=out.exec_derived)
    return out, totals


def check_sharded(cert: dict[str, Any], base: Path, weights: Path | None, shards: int,
                  submit: Submit, progress: Progress | None = None) -> SlicedCheck:
    """The in-process checker on ``shards`` slices of ``cert``'s sequences, joined into
    what one pass gives (the claim from the merged exact totals)."""
    from exactmem.checker.lm.lm_verify import claim_text, merge

    count = len(cert["claims"]["positions"])
    k = max(1, min(shards, count))
    futures = [submit(_check_slice, cert, str(base), (j, k),
                      None if weights is None else str(weights)) for j in range(k)]
    out = SlicedCheck()
    parts: list[dict[str, Any]] = []
    for j, fut in enumerate(futures):
        got, totals = fut.result()
        out.bad += [b for b in got.bad if b not in out.bad]  # a whole-file failure: once
        out.unusable |= got.unusable
        out.unproved += got.unproved
        out.derived.update(got.derived)
        out.ref_derived.update(got.ref_derived)
        out.exec_unproved += got.exec_unproved
        out.exec_derived.update(got.exec_derived)
        if totals:
            parts.append(totals)
        if progress is not None:
            progress("check", (j + 1) * count // k, count)
    if not out.bad and not out.unusable and len(parts) == k:
        out.claim = claim_text(merge(parts))
    return out
