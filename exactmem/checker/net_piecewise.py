"""A feed-forward block that reads one scalar, evaluated piece by piece (standard library).

Sort the scalar inputs ``x_0 <= ... <= x_{T-1}`` (integers over one denominator).  On a run of
consecutive points every unit of a ReLU network of ``x`` is one affine function ``a x + b``
until some ReLU switches, so a row is stored as *pieces* ``(starts, a, b)``: ``starts[p]`` is
the first point of piece ``p``, and the value at a point ``i`` of the piece is
``(a[p] * x_i + b[p]) / den`` with one denominator per layer; ``a`` is ``None`` when every
slope is 0 (a row constant on each piece).

An affine map adds rows on the common refinement of their pieces (rows on the same pieces
share one ``starts`` list, and then the sum is elementwise); a ReLU splits a piece at the
first point where ``a x + b`` changes sign (``a x + b`` is monotone in ``x``: one bisection,
integer comparisons only) and zeroes one side.  A row read with many more pieces than the
other rows of a sum (a row that gains a block each map) is added last: the others' pieces
are placed among its own by bisection and its lists copied in slices.  The outputs are then
evaluated at every point.  The arithmetic is that of the row-major pass, done once per piece
instead of once per point; a Lemma C.1 network's block rows are constant on each block, so
its cost follows the number of blocks, not of points.
"""

import multiprocessing
import os
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import accumulate, repeat
from math import gcd
from operator import add, itemgetter, mul, neg, sub
from typing import Any

from .net_pieces import Row, compact, plus_largest, scaled
from .parse import lcm

Term = tuple[int, Row]
Where = dict[int, Callable[[list[int]], Any]]
Cache = dict[tuple[int, ...], tuple[list[int], Where]]
"""One map's shared work: refinements (by the ids of the ``starts`` lists) and sums of
signed rows (by ``-1``, the cuts' id and the signs and ids of the rows)."""
Map = tuple[tuple[Sequence[Sequence[int]], int], tuple[Sequence[Sequence[int]], int]]


_lcm: Callable[[int, int], int] = lcm  # refused beyond parse.MAX_DEN_BITS


def _refine(starts: list[int], values: list[int], cuts: list[int], where: Where | None,
            ) -> list[int]:
    """A row's per-piece ``values`` on the finer pieces ``cuts`` (every start is a cut);
    ``where[id(starts)]`` picks, for each cut, the value of the piece of ``starts`` it lies in."""
    if cuts is starts or where is None:  # equal pieces
        return values
    picked = where[id(starts)](values)
    return list(picked) if isinstance(picked, tuple) else [picked]


def _refinement(terms: list[Term], cache: Cache) -> tuple[list[int], Where]:
    """The common refinement of the rows' pieces and, per distinct ``starts`` list, a picker
    of the piece each cut lies in (a running count of the starts up to the cut); shared by
    every row of a map that reads the same lists (``cache``, one map's: the lists are alive
    while it runs)."""
    lists = {id(r[0]): r[0] for _, r in terms}
    key = tuple(sorted(lists))
    hit = cache.get(key)
    if hit is None:
        cuts = sorted(set().union(*lists.values()))
        slot = {c: i for i, c in enumerate(cuts)}
        where: Where = {}
        for k, st in lists.items():
            first = [0] * len(cuts)  # 1 where a piece of ``st`` starts
            for c in st:
                first[slot[c]] = 1
            where[k] = itemgetter(*[p - 1 for p in accumulate(first)])
        hit = cache[key] = (cuts, where)
    return hit


def relu(row: Row, xs: list[int]) -> Row:
    """``max(0, row)`` on the points ``xs`` (sorted numerators): each piece splits at most
    once, where ``a x + b`` changes sign."""
    starts, a, b = row
    if a is None:
        return row if min(b) >= 0 else (starts, None, [v if v > 0 else 0 for v in b])
    size = len(xs)
    s2: list[int] = []
    a2: list[int] = []
    b2: list[int] = []
    for st, end, ap, bp in zip(starts, [*starts[1:], size], a, b):
        if ap == 0:
            s2.append(st)
            a2.append(0)
            b2.append(bp if bp > 0 else 0)
            continue
        if ap > 0:  # a x + b > 0 exactly for x > floor(-b / a)
            cut = bisect_right(xs, -bp // ap, st, end)
            a2 += [0, ap]
            b2 += [0, bp]
        else:  # x < ceil(b / -a)
            cut = bisect_left(xs, -(-bp // -ap), st, end)
            a2 += [ap, 0]
            b2 += [bp, 0]
        s2 += [st, cut]
    return compact(s2, a2 if any(a2) else None, b2, size)


LARGEST_SHARE = 4
"""A row read with at least this many times the pieces of the other rows read together is
added last, by :func:`~.net_pieces.plus_largest`."""


def _affine_row(rows: list[Row], wrow: Sequence[int], scale: int, bias: int, size: int,
                cache: Cache) -> Row:
    """``scale * sum(w * row) + bias`` over the common refinement of the rows read."""
    terms = [(x * scale, rows[j]) for j, x in enumerate(wrow) if x]
    if not terms:
        return [0], None, [bias]
    if len(terms) > 1:
        top = max(range(len(terms)), key=lambda t: len(terms[t][1][0]))
        others = sum(len(r[0]) for t, (_, r) in enumerate(terms) if t != top)
        if len(terms[top][1][0]) >= LARGEST_SHARE * others and any(
                r[0] is not terms[top][1][0] for _, r in terms):
            rest = _affine_terms(terms[:top] + terms[top + 1:], bias, size, cache)
            return plus_largest(terms[top][0], terms[top][1], rest, size)
    return _affine_terms(terms, bias, size, cache)


def _group_sum(group: list[tuple[bool, Row]], cuts: list[int], where: Where | None,
               cache: Cache) -> tuple[list[int] | None, list[int]]:
    """The slopes and intercepts of ``sum(±row)`` on ``cuts``, positive rows first (no
    negation pass); kept in ``cache`` for the map's other rows that read the same signed
    rows (the step ``t1 - t2`` of a threshold, read by the next threshold and the label
    sum)."""
    group = sorted(group, key=lambda t: not t[0])
    key = (-1, id(cuts), *[k for positive, row in group for k in (positive, id(row))])
    hit = cache.get(key)
    if hit is not None:
        return hit  # type: ignore[return-value]
    ga: list[int] | None = None
    gb: list[int] | None = None
    for positive, (starts, a, b) in group:
        op = add if positive else sub
        part = _refine(starts, b, cuts, where)
        gb = (part if positive else list(map(neg, part))) if gb is None else list(
            map(op, gb, part))
        if a is not None:
            part = _refine(starts, a, cuts, where)
            ga = list(map(op, ga if ga is not None else repeat(0), part))
    assert gb is not None
    cache[key] = (ga, gb)  # type: ignore[assignment]
    return ga, gb


def _affine_terms(terms: list[Term], bias: int, size: int, cache: Cache) -> Row:
    """``sum(w * row) + bias`` over the common refinement of the rows' pieces."""
    if len(terms) == 1:
        w, (starts, a, b) = terms[0]
        if w == 1 and not bias:  # a copy: share the row
            return terms[0][1]
        return (starts, None if a is None else scaled(a, w),
                list(map(add, scaled(b, w), repeat(bias))) if bias else scaled(b, w))
    cuts, merged, where = terms[0][1][0], False, None
    if any(r[0] is not cuts and r[0] != cuts for _, r in terms):
        (cuts, where), merged = _refinement(terms, cache), True
    groups: dict[int, list[tuple[bool, Row]]] = {}
    for w, row in terms:  # equal |w|: sum the rows first, multiply once (small * big)
        groups.setdefault(abs(w), []).append((w > 0, row))
    a_sum: list[int] | None = None
    b_sum: list[int] = []
    for g, (mag, group) in enumerate(groups.items()):
        ga, gb = _group_sum(group, cuts, where, cache)
        gb = scaled(gb, mag)
        b_sum = list(map(add, b_sum, gb)) if g else gb
        if ga is not None:
            ga = scaled(ga, mag)
            a_sum = ga if a_sum is None else list(map(add, a_sum, ga))
    if bias:
        b_sum = list(map(add, b_sum, repeat(bias)))
    if a_sum is not None and not any(a_sum):
        a_sum = None
    return compact(cuts, a_sum, b_sum, size) if merged else (cuts, a_sum, b_sum)


def _affine_rows(rows: list[Row], w: Sequence[Sequence[int]], scale: int, biases: list[int],
                 size: int, cache: Cache) -> list[Row]:
    """The rows of one affine map; rows with equal weights (and different biases, as the two
    units of a threshold: ``U - T + 1`` and ``U - T``) share one weighted sum, each adding
    its own bias (one pass over the pieces instead of one per term)."""
    keys = [tuple(wrow) for wrow in w]
    count = Counter(keys)
    shared: dict[tuple[int, ...], Row] = {}
    out: list[Row] = []
    for key, bias in zip(keys, biases):
        if count[key] < 2:
            out.append(_affine_row(rows, key, scale, bias, size, cache))
            continue
        base = shared.get(key)
        if base is None:
            base = shared[key] = _affine_row(rows, key, scale, 0, size, cache)
        starts, a, bb = base
        out.append((starts, a, list(map(add, bb, repeat(bias))) if bias else bb))
    return out


def _normalize(rows: list[Row], den: int) -> tuple[list[Row], int]:
    g = den
    for _, a, b in rows:
        for v in b if a is None else (*a, *b):
            g = gcd(g, v)
            if g == 1:
                return rows, den
    return [(s, None if a is None else [v // g for v in a], [v // g for v in b])
            for s, a, b in rows], den // g


def _share_starts(rows: list[Row]) -> list[Row]:
    """Rows on equal pieces share one ``starts`` list.  Lists are grouped by length, last and
    middle start, and compared only within a group (a list shared already is the same
    object: no pass over a long running total's pieces each map)."""
    pool: dict[tuple[int, int, int], list[list[int]]] = {}
    out: list[Row] = []
    for st, a, b in rows:
        group = pool.setdefault((len(st), st[-1], st[len(st) // 2]), [])
        for seen in group:
            if seen is st or seen == st:
                st = seen
                break
        else:
            group.append(st)
        out.append((st, a, b))
    return out


MAX_JOBS = 8
MIN_POINTS_PER_JOB = 1 << 17


def default_jobs(points: int) -> int:
    """Processes for a pass over ``points`` points: ``EXACTMEM_JOBS`` (a positive integer)
    or the CPUs, at most :data:`MAX_JOBS`, and at least :data:`MIN_POINTS_PER_JOB` points
    each (below that a process costs more than it saves)."""
    env = os.environ.get("EXACTMEM_JOBS", "").strip()
    cap = int(env) if env.isdigit() and int(env) > 0 else min(os.cpu_count() or 1, MAX_JOBS)
    return max(1, min(cap, points // MIN_POINTS_PER_JOB))


def sorted_pass(maps: Sequence[Map], xs: list[int], den: int, relu_first: bool = False,
                tick: Callable[[int], object] | None = None) -> tuple[list[list[int]], int]:
    """The network on the sorted points ``xs``: per output row, its numerators at the
    points in order, and their denominator."""
    size = len(xs)
    rows: list[Row] = [([0], [1], [0])]
    keep = [not relu_first]
    for i, ((w, wd), (b, bd)) in enumerate(maps):
        if i or relu_first:
            rows = [r if k else relu(r, xs) for r, k in zip(rows, keep)]
        keep = [(i > 0 or relu_first) and bb >= 0 and all(x >= 0 for x in wrow)
                for wrow, (bb,) in zip(w, b)]
        out_den = _lcm(wd * den, bd)
        fw, fb = out_den // (wd * den), out_den // bd
        cache: Cache = {}
        rows = _affine_rows(rows, w, fw, [bb * fb for (bb,) in b], size, cache)
        if out_den != den:
            rows, out_den = _normalize(rows, out_den)
        rows = _share_starts(rows)
        den = out_den
        if tick is not None:
            tick(len(w))
    values: list[list[int]] = []
    for starts, slopes, icepts in rows:
        vals: list[int] = []
        for st, end, p in zip(starts, [*starts[1:], size], range(len(starts))):
            if slopes is None or slopes[p] == 0:
                vals += repeat(icepts[p], end - st)
            else:
                vals += map(add, map(mul, repeat(slopes[p]), xs[st:end]), repeat(icepts[p]))
        values.append(vals)
    return values, den


def _parallel_pass(maps: Sequence[Map], xs: list[int], den: int, relu_first: bool, jobs: int,
                   tick: Callable[[int], object] | None) -> tuple[list[list[int]], int]:
    """:func:`sorted_pass` on ``jobs`` consecutive ranges of the sorted points, the first
    here, the others in fresh processes (this module and the standard library only); the
    parts over their least common denominator.  A piece restricted to a range keeps its
    coefficients, so every point gets the value one pass gives it (the denominator may be
    a multiple of that pass's: callers reduce)."""
    bounds = [len(xs) * k // jobs for k in range(jobs + 1)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=ctx) as pool:
        futures = [pool.submit(sorted_pass, maps, xs[lo:hi], den, relu_first)
                   for lo, hi in zip(bounds[1:-1], bounds[2:])]
        parts = [sorted_pass(maps, xs[:bounds[1]], den, relu_first, tick)]
        parts += [f.result() for f in futures]
    common = 1
    for _, d in parts:
        common = _lcm(common, d)
    values: list[list[int]] = [[] for _ in parts[0][0]]
    for vals, d in parts:
        f = common // d
        for row, part in zip(values, vals):
            row += part if f == 1 else map(mul, repeat(f), part)
    return values, common


def evaluate(maps: Sequence[Map], xs_cols: Sequence[tuple[int, ...]], den: int,
             relu_first: bool = False, tick: Callable[[int], object] | None = None,
             jobs: int | None = None) -> tuple[list[tuple[int, ...]], int]:
    """``maps`` (a ReLU network, ReLU between maps) on the scalar columns ``xs_cols``
    (1-tuples over ``den``); ``relu_first``: a ReLU precedes the first map.  Returns the
    output columns and their denominator (not reduced).  ``jobs``: processes, each on a
    range of the sorted points (``None``: :func:`default_jobs`); ``tick`` counts the first
    range's rows."""
    order = sorted(range(len(xs_cols)), key=lambda i: xs_cols[i][0])
    xs = [xs_cols[i][0] for i in order]
    size = len(xs)
    if not size:
        return [], den
    jobs = default_jobs(size) if jobs is None else max(1, min(jobs, size))
    values, den = _parallel_pass(maps, xs, den, relu_first, jobs, tick) if jobs > 1 \
        else sorted_pass(maps, xs, den, relu_first, tick)
    out: list[tuple[int, ...]] = [()] * size
    for pos, col in zip(order, zip(*values)):
        out[pos] = col
    return out, den
