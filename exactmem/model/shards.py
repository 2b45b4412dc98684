"""Exact evaluation in K disjoint slices of the sequences, in processes or on Dask.

The forward pass treats every sequence on its own (attention mixes positions of one
sequence only), so evaluating the K slices ``[k N / K, (k + 1) N / K)`` and concatenating
their predictions gives the evaluation of the whole dataset; failures are renumbered to
the sequence indices of the whole dataset.  Whatever K is asked, at most
:data:`~exactmem.checker.shard_plan.MAX_SHARDS` slices are made, never more than there
are sequences, in at most one local process per CPU
(:func:`~exactmem.checker.shard_plan.shard_plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from exactmem.checker.shard_plan import shard_plan
from exactmem.errors import ExactmemError
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import Evaluation, join
from exactmem.model.forward import Progress
from exactmem.model.interval_verdict import evaluate_certified
from exactmem.model.spec import NetworkSpec

Submit = Callable[..., Any]
"""``submit(function, *args)`` returning a future (a Dask client's ``submit`` works)."""


def bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """The K slices ``[lo, hi)`` of ``range(count)``: disjoint, in order, covering it."""
    return [(k * count // shards, (k + 1) * count // shards) for k in range(shards)]


def _evaluate_slice(spec: NetworkSpec, ds: Dataset, hints: Mapping[str, Any] | None,
                    ) -> Evaluation:
    return evaluate_certified(spec, ds, hints)


def evaluate_sharded(spec: NetworkSpec, ds: Dataset, hints: Mapping[str, Any] | None,
                     shards: int, submit: Submit | None = None,
                     progress: Progress | None = None) -> Evaluation:
    """:func:`~exactmem.model.interval_verdict.evaluate_certified` in ``shards`` slices, run by
    ``submit`` (default: a local process pool); ``progress("shards", done, K)``."""
    if type(shards) is not int or shards < 1:
        raise ExactmemError(f"shards: expected a positive integer, found {shards!r}")
    slices, processes = shard_plan(shards, ds.N)
    parts = [(lo, hi) for lo, hi in bounds(ds.N, slices) if hi > lo]
    report = progress or (lambda _s, _d, _t: None)
    report("shards", 0, len(parts))
    pool = None
    if submit is None:
        pool = ProcessPoolExecutor(max_workers=processes)
        submit = pool.submit
    try:
        futures: list[Future[Evaluation]] = [
            submit(_evaluate_slice, spec, ds.slice(lo, hi), hints) for lo, hi in parts]
        done = []
        for k, ((lo, _), fut) in enumerate(zip(parts, futures, strict=True)):
            done.append((lo, fut.result()))
            report("shards", k + 1, len(parts))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return join(done)
