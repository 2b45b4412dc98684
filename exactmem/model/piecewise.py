"""Exact evaluation of a ReLU network that reads one scalar, piece by piece.

The points ``x_0 <= ... <= x_{T-1}`` (integers over one denominator) are sorted; each row of
the network is a list of *pieces*: a start index into the points and coefficients ``(a, b)``
with the value ``(a x + b) / den`` on the points of the piece.  An affine map combines rows on
the common refinement of their pieces; a ReLU splits each piece where ``a x + b`` changes sign
(affine, hence monotone, so one ``searchsorted``) and zeroes one side.  Same exact values as
:func:`exactmem.model.tokenwise.dense_feedforward`, at a cost that follows the number of pieces
(for Lemma C.1 networks: blocks, not points).  Coefficients are Python integers in numpy
``object`` arrays; comparisons and sorting use the integer points only.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import reduce

import numpy as np

from exactmem.model import forked
from exactmem.model.spec import Affine

_I64 = np.iinfo(np.int64)


@dataclass(slots=True)
class Rows:
    """One row: ``starts`` (int64, increasing, first 0), slopes ``a`` (``None`` when all are
    0) and intercepts ``b`` (object arrays of Python integers), one entry per piece."""

    starts: np.ndarray
    a: np.ndarray | None
    b: np.ndarray


def _obj(values: list[int]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _compact(row: Rows, size: int) -> Rows:
    """Drop empty pieces; join neighbours with equal coefficients (the same row when
    nothing changes)."""
    s, a, b = row.starts, row.a, row.b
    live = s < np.append(s[1:], size)
    new = live.copy()
    if len(s) > 1:
        idx = np.flatnonzero(live)
        same = b[idx[1:]] == b[idx[:-1]]
        if a is not None:
            same &= a[idx[1:]] == a[idx[:-1]]
        new[idx[1:][same.astype(bool)]] = False
    if new.all():
        return row
    a2 = None if a is None else a[new]
    return Rows(s[new], a2 if a2 is not None and a2.any() else None, b[new])


def _searchable(t: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Thresholds clipped to just outside the points' range, as int64 when the points are."""
    if xs.dtype == object or len(t) == 0:
        return t
    lo, hi = int(xs[0]) - 1, int(xs[-1]) + 1
    return np.array([min(max(int(v), lo), hi) for v in t], dtype=np.int64)


def relu(row: Rows, xs: np.ndarray) -> Rows:
    """``max(0, row)``: a piece with ``a > 0`` is positive exactly for ``x > floor(-b / a)``,
    one with ``a < 0`` for ``x < ceil(b / -a)``; ``a = 0`` pieces keep ``b`` if positive."""
    if row.a is None:
        if row.b.min() >= 0:
            return row
        return Rows(row.starts, None, np.where(row.b > 0, row.b, 0).astype(object))
    size = len(xs)
    ends = np.append(row.starts[1:], size)
    a, b = row.a, row.b
    sign = np.array([(v > 0) - (v < 0) for v in a], dtype=np.int8)
    cut = ends.copy()
    pos, neg = sign > 0, sign < 0
    if pos.any():
        t = _searchable(np.array([(-bb) // aa for aa, bb in zip(a[pos], b[pos], strict=True)],
                                 dtype=object), xs)
        cut[pos] = np.searchsorted(xs, t, side="right")
    if neg.any():
        t = _searchable(np.array([-((-bb) // -aa) for aa, bb in zip(a[neg], b[neg], strict=True)],
                                 dtype=object), xs)
        cut[neg] = np.searchsorted(xs, t, side="left")
    cut = np.minimum(np.maximum(cut, row.starts), ends)
    zero = _obj([0] * len(a))
    flat_b = np.where(sign == 0, np.where(b > 0, b, 0), b).astype(object)
    # each piece becomes two: [start, cut) and [cut, end)
    starts = np.empty(2 * len(a), dtype=np.int64)
    starts[0::2], starts[1::2] = row.starts, cut
    na, nb = np.empty(2 * len(a), dtype=object), np.empty(2 * len(a), dtype=object)
    na[0::2] = np.where(neg, a, zero)
    nb[0::2] = np.where(neg, b, np.where(sign == 0, flat_b, zero))
    na[1::2] = np.where(pos, a, zero)
    nb[1::2] = np.where(pos, b, np.where(sign == 0, flat_b, zero))
    return _compact(Rows(starts, na, nb), size)


LARGEST_SHARE = 4
"""A row read with at least this many times the pieces of the other rows read together is
added last, by :func:`_plus_largest`."""


def _plus_pieces(big: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``big`` plus ``values`` repeated ``counts`` times; only where a value is not 0."""
    nz = np.repeat(values != 0, counts).astype(bool)
    if not nz.any():
        return big
    out = big.copy()
    out[nz] = big[nz] + np.repeat(values, counts)[nz]
    return out


def _plus_largest(w: int, big: Rows, rest: Rows, size: int) -> Rows:
    """``w * big + rest`` where ``big`` has many more pieces than ``rest``: the cuts of
    ``rest`` are inserted into ``big``'s (one ``searchsorted``), ``big``'s coefficients are
    copied (a new cut repeats the piece it lies in), and ``rest``'s are added only where
    they are not 0 (a row that gains a block a map stays cheap)."""
    bs, rs = big.starts, rest.starts
    p = np.searchsorted(bs, rs, side="left")
    new = (p == len(bs)) | (bs[np.minimum(p, len(bs) - 1)] != rs)
    at = p[new]
    cuts = np.insert(bs, at, rs[new])
    counts = np.diff(np.append(p + np.cumsum(new) - new, len(cuts)))

    def onto(values: np.ndarray) -> np.ndarray:
        out = np.insert(values, at, values[at - 1]) if len(at) else values
        return out if w == 1 else out * w

    b = _plus_pieces(onto(big.b), rest.b, counts)
    a: np.ndarray | None = None
    if big.a is not None or rest.a is not None:
        base = onto(big.a) if big.a is not None else _obj([0] * len(cuts))
        a = base if rest.a is None else _plus_pieces(base, rest.a, counts)
        a = a if a.any() else None
    return _compact(Rows(cuts, a, b), size)


def _combine(rows: list[Rows], weights: list[tuple[int, int]], bias: int, size: int) -> Rows:
    """``sum(w * rows[j]) + bias`` on the common refinement of the rows read."""
    if not weights:
        return Rows(np.zeros(1, dtype=np.int64), None, _obj([bias]))
    if len(weights) > 1:
        top = max(range(len(weights)), key=lambda t: len(rows[weights[t][1]].starts))
        big = rows[weights[top][1]]
        others = sum(len(rows[j].starts) for t, (_, j) in enumerate(weights) if t != top)
        if len(big.starts) >= LARGEST_SHARE * others and any(
                rows[j].starts is not big.starts for _, j in weights):
            rest = _combine(rows, weights[:top] + weights[top + 1:], bias, size)
            return _plus_largest(weights[top][0], big, rest, size)
    if len(weights) == 1:
        w, j = weights[0]
        r = rows[j]
        if w == 1 and not bias:  # a copy: share the row
            return r
        return Rows(r.starts, None if r.a is None else r.a * w, r.b * w + bias)
    starts = rows[weights[0][1]].starts
    merged = not all(rows[j].starts is starts or np.array_equal(rows[j].starts, starts)
                     for _, j in weights)
    if merged:
        starts = np.unique(np.concatenate([rows[j].starts for _, j in weights]))
    a: np.ndarray | None = None
    b: np.ndarray | None = None
    groups: dict[int, list[tuple[int, int]]] = {}
    for w, j in weights:  # equal |w|: sum the rows first, multiply once (small * big)
        groups.setdefault(abs(w), []).append((1 if w > 0 else -1, j))
    for mag, terms in groups.items():
        ga: np.ndarray | None = None
        gb: np.ndarray | None = None
        for sign, j in sorted(terms, key=lambda t: -t[0]):  # positive first: no negation
            r = rows[j]
            pick = np.searchsorted(r.starts, starts, side="right") - 1 if merged else None
            rb = r.b if pick is None else r.b[pick]
            gb = (rb if sign > 0 else -rb) if gb is None else gb + rb if sign > 0 else gb - rb
            if r.a is not None:
                ra = r.a if pick is None else r.a[pick]
                ga = (ra if sign > 0 else -ra) if ga is None else ga + ra if sign > 0 else ga - ra
        assert gb is not None
        if mag != 1:
            gb = gb * mag
            ga = None if ga is None else ga * mag
        b = gb if b is None else b + gb
        if ga is not None:
            a = ga if a is None else a + ga
    assert b is not None
    if bias:
        b = b + bias
    row = Rows(starts, a if a is not None and a.any() else None, b)
    return _compact(row, size) if merged else row


def _combine_rows(rows: list[Rows], weight: Sequence[Sequence[int]], fw: int, biases: list[int],
                  size: int) -> list[Rows]:
    """The rows of one affine map; rows with equal weights (and different biases, as the two
    units of a threshold: ``U - T + 1`` and ``U - T``) share one weighted sum, each adding
    its own bias (one pass over the pieces instead of one per term)."""
    keys = [tuple(wrow) for wrow in weight]
    count = Counter(keys)
    shared: dict[tuple[int, ...], Rows] = {}
    out: list[Rows] = []
    for key, bias in zip(keys, biases, strict=True):
        terms = [(v * fw, j) for j, v in enumerate(key) if v]
        if count[key] < 2:
            out.append(_combine(rows, terms, bias, size))
            continue
        base = shared.get(key)
        if base is None:
            base = shared[key] = _combine(rows, terms, 0, size)
        out.append(Rows(base.starts, base.a, base.b + bias) if bias else base)
    return out


def _reduce(rows: list[Rows], den: int) -> tuple[list[Rows], int]:
    g = den
    for r in rows:
        for v in (*r.b, *(r.a if r.a is not None else ())):
            g = math.gcd(g, int(v))
            if g == 1:
                return rows, den
    return [Rows(r.starts, None if r.a is None else r.a // g, r.b // g) for r in rows], den // g


MAX_JOBS = 8
MIN_POINTS_PER_JOB = 1 << 17


def default_jobs(points: int) -> int:
    """Processes for a pass over ``points`` sorted points: ``EXACTMEM_JOBS`` (a positive
    integer) or the CPUs, at most :data:`MAX_JOBS`, and at least :data:`MIN_POINTS_PER_JOB`
    points each (below that a process costs more than it saves)."""
    env = os.environ.get("EXACTMEM_JOBS", "").strip()
    cap = int(env) if env.isdigit() and int(env) > 0 else min(os.cpu_count() or 1, MAX_JOBS)
    return max(1, min(cap, points // MIN_POINTS_PER_JOB))


def _sorted_pass(maps: tuple[Affine, ...], xs: np.ndarray, den: int, relu_first: bool,
                 tick: Callable[[], None] | None = None) -> tuple[np.ndarray, int]:
    """The network on the sorted points ``xs``: the (rows, points) numerators in the order
    of ``xs`` and their denominator."""
    size = len(xs)
    rows = [Rows(np.zeros(1, dtype=np.int64), _obj([1]), _obj([0]))]
    keep = [not relu_first]
    for i, aff in enumerate(maps):
        if i or relu_first:
            rows = [r if k else relu(r, xs) for r, k in zip(rows, keep, strict=True)]
        bias = aff.bias.num if aff.bias is not None else None
        bden = aff.bias.den if aff.bias is not None else 1
        keep = [(i > 0 or relu_first) and (bias is None or bias[r][0] >= 0)
                and all(v >= 0 for v in row) for r, row in enumerate(aff.weight.num)]
        out_den = aff.weight.den * den * bden // math.gcd(aff.weight.den * den, bden)
        fw, fb = out_den // (aff.weight.den * den), out_den // bden
        rows = _combine_rows(rows, aff.weight.num, fw,
                             [bias[r][0] * fb if bias is not None else 0
                              for r in range(len(aff.weight.num))], size)
        if out_den != den:
            rows, out_den = _reduce(rows, out_den)
        den = out_den
        if tick is not None:
            tick()
    xo = xs.astype(object)
    out = np.empty((len(rows), size), dtype=object)
    for k, r in enumerate(rows):
        lengths = np.diff(np.append(r.starts, size))
        b = np.repeat(r.b, lengths)
        out[k] = b if r.a is None else np.repeat(r.a, lengths) * xo + b
    return out, den


def _parallel_pass(maps: tuple[Affine, ...], xs: np.ndarray, den: int, relu_first: bool,
                   jobs: int, tick: Callable[[], None] | None) -> tuple[np.ndarray, int]:
    """:func:`_sorted_pass` on ``jobs`` consecutive ranges of the sorted points, the first
    here and the others in forked children when this process runs one thread (else in
    fresh processes); the parts are put over their least common
    denominator.  Each point's value is its own (a piece restricted to a range keeps its
    coefficients), so the values equal one pass's; the denominator may be a multiple of
    its (callers reduce)."""
    bounds = [len(xs) * k // jobs for k in range(jobs + 1)]
    ranges = list(zip(bounds[1:-1], bounds[2:], strict=True))
    if forked.usable(alone=True):  # children share this process's pages (the maps)
        children = [forked.Forked(_sorted_pass, maps, xs[lo:hi], den, relu_first)
                    for lo, hi in ranges]
        try:
            parts = [_sorted_pass(maps, xs[:bounds[1]], den, relu_first, tick)]
            parts += [child.result() for child in children]
        finally:
            for child in children:
                child.close()
    else:  # threads run here: fresh processes, sent the maps
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=ctx) as pool:
            futures = [pool.submit(_sorted_pass, maps, xs[lo:hi], den, relu_first)
                       for lo, hi in ranges]
            parts = [_sorted_pass(maps, xs[:bounds[1]], den, relu_first, tick)]
            parts += [f.result() for f in futures]
    common = reduce(lambda p, q: p * q // math.gcd(p, q), (d for _, d in parts), 1)
    return np.concatenate([o if d == common else o * (common // d) for o, d in parts],
                          axis=1), common


def evaluate(maps: tuple[Affine, ...], x: np.ndarray, den: int, relu_first: bool = False,
             tick: Callable[[], None] | None = None, jobs: int | None = None,
             ) -> tuple[np.ndarray, int]:
    """``maps`` (ReLU between consecutive maps; also before the first with ``relu_first``)
    on the scalars ``x / den`` (one per column).  Returns the (rows, columns) numerators
    (object array) and a denominator (not reduced); ``tick()`` after each map (of the
    first range of points when in parallel).  ``jobs``: processes, each on a range of the
    sorted points (``None``: :func:`default_jobs`)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    if xs.dtype != object and (xs.size == 0 or int(np.abs(xs).max()) >= _I64.max // 2):
        xs = xs.astype(object)
    size = len(xs)
    if size == 0:
        return np.zeros((maps[-1].out_dim, 0), dtype=object), den
    jobs = default_jobs(size) if jobs is None else max(1, min(jobs, size))
    if jobs > 1:
        part, den = _parallel_pass(maps, xs, den, relu_first, jobs, tick)
    else:
        part, den = _sorted_pass(maps, xs, den, relu_first, tick)
    out = np.empty(part.shape, dtype=object)
    out[:, order] = part
    return out, den
