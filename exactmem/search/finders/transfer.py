"""Witness transfer: re-fit the tail of a network found for another labelling.

Two labellings of the same sequences often share a *front* -- the input map, every
attention layer and every feed-forward layer but the last -- and differ only in the
*tail* (the last feed-forward layer and the readout).  Holding a donor's front fixed
turns the query into a small one: the streams entering the tail are numbers, so only the
tail's unknowns remain (the positions encoding with ``EncodeOptions.fixed``).

A transfer can only *find*: a re-fitted network is certified and verified by the
checker like any witness, and a failed transfer says nothing about the labelling (the
caller then runs the full query).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset
from exactmem.model.spec import Attention, Embedding, FeedForward, Linear, NetworkSpec
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.finders.front_pool import cheap_test_applies
from exactmem.search.question.shape import Shape

DEFAULT_TRANSFER_RLIMIT = 2_000_000  # Z3 resource units per re-fit (deterministic)
DEFAULT_MAX_FRONTS = 64  # distinct fronts tried per query

Rows = tuple[tuple[Fraction, ...], ...]


def _rows(m: Any) -> Rows:
    return tuple(tuple(r) for r in m.to_fractions())


def front_of(spec: NetworkSpec, shape: Shape) -> tuple[tuple[str, Rows], ...]:
    """The fixed parameters of ``spec``'s front, named as the encoders name them (a
    full-rank head as ``A = W_K^T W_Q`` and ``B = W_O W_V``)."""
    layers = spec.layers
    first = layers[0]
    table = first.table if isinstance(first, Embedding) else \
        first.map.weight if isinstance(first, Linear) else None
    if table is None:
        raise ValueError("a searched network starts with its input map")
    out: list[tuple[str, Rows]] = [("embed", _rows(table))]
    blocks = [x for x in layers[1:-1] if isinstance(x, Attention)]
    ffs = [x for x in layers[1:-1] if isinstance(x, FeedForward)]
    for layer, att in enumerate(blocks):
        for h, head in enumerate(att.heads):
            p = f"att{layer}.{h}."
            if shape.full_rank_heads:
                out.append((p + "A", _rows(head.key.transpose().matmul(head.query))))
                out.append((p + "B", _rows(head.output.matmul(head.value))))
            else:
                out += [(p + "Q", _rows(head.query)), (p + "K", _rows(head.key)),
                        (p + "V", _rows(head.value)), (p + "O", _rows(head.output))]
        if layer < len(ffs) and layer < shape.layers - 1:
            w1, w2 = ffs[layer].layers
            assert w1.bias is not None and w2.bias is not None
            out += [(f"ff{layer}.W1", _rows(w1.weight)), (f"ff{layer}.b1", _rows(w1.bias)),
                    (f"ff{layer}.W2", _rows(w2.weight)), (f"ff{layer}.b2", _rows(w2.bias))]
    return tuple(out)


def streams(spec: NetworkSpec, shape: Shape, ds: Dataset) -> list[tuple[Fraction, ...]]:
    """The exact vector that enters the tail at the last position of every sequence."""
    from exactmem.arith import ScaledMatrix
    from exactmem.model.forward import forward, outputs
    from exactmem.model.spec import Affine, Readout

    tail = 2 if shape.ff_width else 1
    m = shape.d_model
    ident = ScaledMatrix.from_rows([[Fraction(int(i == j)) for j in range(m)]
                                    for i in range(m)], cols=m)
    front = NetworkSpec(spec.input_kind, spec.input_dim, ds.n,
                        (*spec.layers[:-tail], Linear(Affine(ident))),
                        Readout("argmax", "last"))
    return [rows[0] for rows in outputs(front, forward(front, ds))]


def tail_separates(ys: Sequence[tuple[Fraction, ...]], labels: Sequence[int],
                   shape: Shape) -> bool | None:
    """Can the tail realize ``labels`` on the streams ``ys``?  Exact for a one-dimensional
    stream and two labels: the tail's class-score difference is a continuous piecewise
    linear function of the stream with at most ``ff_width`` kinks (any such function, the
    readout and ``W2`` being free), so along the sorted stream values the label may change
    at most ``ff_width + 1`` times, and equal values need equal labels (the residual makes
    the stream itself part of the readout's input).  ``None`` where no such test is known
    (wider streams, no residual, more classes): the caller asks Z3."""
    if not cheap_test_applies(shape, 2) or any(y not in (0, 1) for y in labels):
        return None
    by_value: dict[Fraction, int] = {}
    for y, lab in zip(ys, labels, strict=True):
        if by_value.setdefault(y[0], lab) != lab:
            return False
    order = [by_value[v] for v in sorted(by_value)]
    changes = sum(a != b for a, b in zip(order, order[1:], strict=False))
    return changes <= shape.ff_width + 1


Fronted = tuple[NetworkSpec, list[tuple[Fraction, ...]]]


def random_fronts(shape: Shape, ds: Dataset, count: int, seed: int,
                  span: int = 4) -> list[Fronted]:
    """``count`` networks of ``shape`` with random small rational fronts (integers in
    ``[-span, span]``, value maps also halves and quarters) and zero tails, each with its
    streams: fronts nobody searched for, for labellings whose queries found nothing."""
    return list(itertools.islice(iter_random_fronts(shape, ds, seed, span), count))


def iter_random_fronts(shape: Shape, ds: Dataset, seed: int, span: int = 4
                       ) -> Iterator[Fronted]:
    """The endless sequence that :func:`random_fronts` takes its first ``count`` from."""
    import random

    from exactmem.arith import ScaledMatrix
    from exactmem.search.question.shape import output_dim, spec_of

    rng = random.Random(seed)
    m, s, q = shape.d_model, shape.head_dim, shape.ff_width
    dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert dim is not None

    def mat(rows: int, cols: int, dens: tuple[int, ...] = (1,)) -> ScaledMatrix:
        return ScaledMatrix.from_rows([[Fraction(rng.randint(-span, span), rng.choice(dens))
                                        for _ in range(cols)] for _ in range(rows)], cols=cols)

    while True:
        mats = {"embed": mat(m, dim)}
        for layer in range(shape.layers):
            for h in range(shape.heads):
                p = f"att{layer}.{h}."
                mats |= {p + "Q": mat(s, m), p + "K": mat(s, m), p + "V": mat(s, m),
                         p + "O": mat(m, s, (1, 2, 4))}
            if q and layer < shape.layers - 1:
                mats |= {f"ff{layer}.W1": mat(q, m), f"ff{layer}.b1": mat(q, 1),
                         f"ff{layer}.W2": mat(m, q), f"ff{layer}.b2": mat(m, 1)}
        spec = spec_of(shape, ds.inputs, dim, ds.n, output_dim(ds, shape), mats)
        yield spec, streams(spec, shape, ds)


DEFAULT_POOL = 4_000_000  # random fronts per shape (where the array pool serves; else the
# first ``limit`` of the exact ones)


class _Pool:
    """Random fronts drawn as far as some caller has needed them, kept for the next."""

    def __init__(self, ds: Dataset, shape: Shape, seed: int) -> None:
        self.items: list[Fronted] = []
        self.source = iter_random_fronts(shape, ds, seed)

    def upto(self, count: int) -> Iterator[Fronted]:
        for i in range(count):
            if i == len(self.items):
                self.items.append(next(self.source))
            yield self.items[i]


@functools.lru_cache(maxsize=4)
def _pool(ds_key: str, shape: Shape, seed: int) -> _Pool:
    from exactmem.model.dataset import dataset_from_json

    return _Pool(dataset_from_json(json.loads(ds_key)), shape, seed)


def pool_candidates(ds: Dataset, shape: Shape, count: int = DEFAULT_POOL, seed: int = 0,
                    limit: int = DEFAULT_MAX_FRONTS) -> list[NetworkSpec]:
    """Random fronts (cached per process: they depend on the sequences, not the labels)
    whose streams some tail can label as ``ds`` is labelled, or, where no cheap test is
    known, the first ``limit`` of them."""
    import dataclasses as dc

    from exactmem.search.finders import front_pool

    if front_pool.applies(ds, shape):  # the fronts run as arrays, a million at a time
        pool = front_pool.pool_for(ds, shape, seed)
        return [pool.spec(i, ds) for i in pool.candidates(ds.labels, count, limit)]
    if not cheap_test_applies(shape, 2) or any(y not in (0, 1) for y in ds.labels):
        count = min(count, limit)  # no cheap test: only the first ``limit`` are asked
    unlabelled = dc.replace(ds, labels=tuple(0 for _ in ds.labels))
    key = json.dumps(unlabelled.to_json(), sort_keys=True)
    out = []
    for spec, ys in _pool(key, shape, seed).upto(count):
        if tail_separates(ys, ds.labels, shape) is not False:
            out.append(spec)
            if len(out) >= limit:
                break
    return out


def donor_specs(shape: Shape, donors: Iterable[tuple[dict[str, Any], dict[str, Any]]]
                ) -> list[NetworkSpec]:
    """Donor networks as networks of ``shape``: ``(donor shape, network JSON)`` pairs;
    a donor of a nested smaller shape is zero-padded, other shapes are skipped."""
    from exactmem.certificate import spec_from_json
    from exactmem.search.encode.witness import pad_witness
    from exactmem.search.question.shape import nests_in

    out = []
    for shape_obj, network in donors:
        small = Shape.from_dict(shape_obj)
        if small != shape and not nests_in(small, shape):
            continue
        spec = spec_from_json(network)
        out.append(spec if small == shape else pad_witness(spec, small, shape))
    return out


def transfer(ds: Dataset, shape: Shape, donors: Sequence[NetworkSpec],
             opts: EncodeOptions | None = None, rlimit: int = DEFAULT_TRANSFER_RLIMIT,
             max_fronts: int = DEFAULT_MAX_FRONTS, timeout_s: float = 60.0,
             certificate_path: str | Path | None = None, cheap_test: bool = True) -> Any:
    """A checker-verified network of ``shape`` memorizing ``ds`` whose front is a donor's,
    as a :class:`~exactmem.search.question.outcome.QueryResult`, or ``None``.

    Distinct fronts are tried in the order given (at most ``max_fronts``), each under
    Z3's resource limit ``rlimit``; the first re-fit the checker verifies is returned.
    With ``cheap_test`` a front that :func:`tail_separates` rules out is not asked."""
    from exactmem.search.encode.encoding_positions import encode_positions
    from exactmem.search.encode.witness import witness_spec
    from exactmem.search.question.outcome import (
        Assignment,
        Found,
        QueryResult,
        certify_witness,
        shape_params,
    )
    from exactmem.search.solvers import z3_backend

    opts = opts or EncodeOptions()
    start = time.monotonic()
    seen: set[tuple[tuple[str, Rows], ...]] = set()
    for spec in donors:
        if len(seen) >= max_fronts or time.monotonic() - start > timeout_s:
            break
        front = front_of(spec, shape)
        if front in seen:
            continue
        seen.add(front)
        if opts.bound is not None and any(abs(v) > opts.bound for _, rows in front
                                          for row in rows for v in row):
            continue  # a front outside the weight box cannot be part of an answer
        if cheap_test and cheap_test_applies(shape, 2) and \
                tail_separates(streams(spec, shape, ds), ds.labels, shape) is False:
            continue  # no tail can: no solver call
        problem = encode_positions(ds, shape, dataclasses.replace(opts, fixed=front))
        left = max(0.001, timeout_s - (time.monotonic() - start))
        raw = z3_backend.solve(problem, left, rlimit=rlimit)
        if not isinstance(raw, Assignment):
            continue
        witness = witness_spec(ds, shape, problem, raw.values, opts.fixed_embed)
        cert, failures = certify_witness(ds, shape, witness, opts)
        if failures:
            continue
        path = None
        if certificate_path is not None:
            from exactmem.certificate import write_certificate

            write_certificate(cert, certificate_path)
            path = str(certificate_path)
        return QueryResult(shape, shape_params(ds, shape), Found(witness),
                           time.monotonic() - start, cert, path,
                           notes=(f"tail re-fitted on the front of an earlier witness "
                                  f"({len(seen)} front(s) tried)",),
                           extra=(("transfer_fronts", len(seen)),))
    return None
