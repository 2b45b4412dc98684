"""The checker's own exact forward pass (standard library only).

State: a table of distinct columns (tuples of ints over one shared denominator) and, for
each sequence, the table index of each position (``-1`` once a position is not needed).
Token-wise layers run once per distinct column; a feed-forward block that reads one scalar
runs piece by piece (piecewise.py).
"""

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from fractions import Fraction
from itertools import accumulate
from math import gcd
from operator import add, itemgetter, mul, neg, sub
from typing import Protocol

from . import net_piecewise as piecewise
from .net_attention import (
    bias_or_zero,
    head_shift,
    key_positions,
    key_sets,
    keys_of,
    restate,
    tied,
    value_output,
    weighs_equally,
    zero_bias,
)
from .parse import Layer, Matrix, bounded, lcm

SWEEP_MIN_HIDDEN = 32

Col = tuple[int, ...]  # one column: integer numerators over the state's denominator
Index = list[list[int]]  # per sequence, the column id of each position (-1: not needed)
State = tuple[list[Col], int, Index]  # (distinct columns, their denominator, index)
Map = tuple[Matrix, Matrix]  # (weight, bias) of one affine map
Terms = list[tuple[bool, int]]  # (positive, row) pairs of a sum


class Tick(Protocol):
    """Progress: ``tick(k)`` counts ``k`` units of work done."""

    def __call__(self, k: int = 1) -> None: ...


def _lcm(a: int, b: int) -> int:
    return lcm(a, b)  # refused beyond parse.MAX_DEN_BITS


def normalize(cols: list[Col], den: int) -> tuple[list[Col], int]:
    """Divide every numerator and the denominator by their common gcd."""
    g = den
    for c in cols:
        for x in c:
            g = gcd(g, x)
            if g == 1:
                return cols, den
    return [tuple(x // g for x in c) for c in cols], den // g


def affine(mat: Matrix, bias: Matrix, cols: Sequence[Col], den: int) -> tuple[list[Col], int]:
    """``W x + b`` on every column; ``mat``/``bias`` are (rows, den) pairs."""
    (w, wd), (b, bd) = mat, bias
    out_den = _lcm(wd * den, bd)
    fw, fb = out_den // (wd * den), out_den // bd
    sparse = [[(j, x) for j, x in enumerate(row) if x] for row in w]
    bs = [r[0] * fb for r in b]
    live = [(i, row) for i, row in enumerate(sparse) if row]
    if 2 * len(live) < len(sparse):  # mostly zero rows: start from the bias
        out: list[Col] = []
        for c in cols:
            v = list(bs)
            for i, row in live:
                v[i] += sum(x * c[j] for j, x in row) * fw
            out.append(tuple(v))
        return normalize(out, out_den)
    out = [tuple(sum(x * c[j] for j, x in row) * fw + bb for row, bb in zip(sparse, bs))
           for c in cols]
    return normalize(out, out_den)


def _sweep(first: Map, second: Map, cols: Sequence[Col], den: int) -> tuple[list[Col], int]:
    """``second(relu(first(x)))`` for scalar inputs by sorting the ReLU breakpoints."""
    (w1, d1), (b1, e1) = first
    (w2, d2), (b2, e2) = second
    a = [r[0] for r in w1]
    b = [r[0] for r in b1]
    units = range(len(a))
    pos = sorted((Fraction(-b[j] * d1, a[j] * e1), j) for j in units if a[j] > 0)
    neg = sorted((Fraction(-b[j] * d1, a[j] * e1), j) for j in units if a[j] < 0)
    tp, tn = [t for t, _ in pos], [t for t, _ in neg]
    k = len(w2)
    const = [sum(w2[r][j] * b[j] for j in units if a[j] == 0 and b[j] > 0) for r in range(k)]

    def sums(order: Iterable[tuple[Fraction, int]], coef: list[int]) -> list[list[int]]:
        return [[0, *accumulate(w2[r][j] * coef[j] for _, j in order)] for r in range(k)]

    p1, p0 = sums(pos, a), sums(pos, b)
    n1, n0 = sums(reversed(neg), a), sums(reversed(neg), b)
    out_den = bounded(d2 * d1 * e1 * den * e2)
    out: list[Col] = []
    for c in cols:
        x = c[0]
        ip = bisect_left(tp, Fraction(x, den))
        im = len(tn) - bisect_right(tn, Fraction(x, den))
        out.append(tuple((p1[r][ip] + n1[r][im]) * x * e1 * e2
                         + (p0[r][ip] + n0[r][im] + const[r]) * d1 * den * e2
                         + b2[r][0] * d2 * d1 * e1 * den for r in range(k)))
    return normalize(out, out_den)


def _combine(rows: list[list[int]], terms: Terms, mag: int) -> list[int]:
    """``mag * sum(+-rows[j])`` over ``terms = [(positive, j)]``, elementwise."""
    positive, j = terms[0]
    part = rows[j] if positive else list(map(neg, rows[j]))
    for positive, j in terms[1:]:
        part = list(map(add if positive else sub, part, rows[j]))
    return part if mag == 1 else list(map(mag.__mul__, part))


def no_tick(k: int = 1) -> None:
    """No progress to report."""


def needed_positions(layers: Sequence[Layer], read: Iterable[int], n: int) -> list[list[int]]:
    """For each layer, the positions whose outputs are needed: the read positions after the
    last layer; before an attention layer, the positions it needs after it and the keys of
    each of them (a query reads only its own column and its keys; token-wise layers keep
    positions apart).  Positions outside are never computed: no needed value depends on
    them."""
    need = sorted(set(read))
    needs: list[list[int]] = [[] for _ in layers]
    for i in range(len(layers) - 1, -1, -1):
        needs[i] = need
        if layers[i]["type"] == "attention":
            wider = set(need)
            for q in need:
                wider.update(keys_of(layers[i], n, q))
            need = sorted(wider)
    return needs


def _dense(maps: Sequence[Map], cols: Sequence[Col], den: int, tick: Tick = no_tick
           ) -> tuple[list[Col], int]:
    """The ReLU network row-major (one list per coordinate over all columns): sparse
    weights, inputs with equal weight magnitude summed before one multiplication."""
    size = len(cols)
    rows = [list(r) for r in zip(*cols)]
    keep = [False] * len(rows)  # rows that are sums of ReLU outputs: the ReLU keeps them
    for i, ((w, wd), (b, bd)) in enumerate(maps):
        if i:
            rows = [r if k else [x if x > 0 else 0 for x in r] for r, k in zip(rows, keep)]
        keep = [i > 0 and bb >= 0 and all(x >= 0 for x in wrow) for wrow, (bb,) in zip(w, b)]
        out_den = _lcm(wd * den, bd)
        fw, fb = out_den // (wd * den), out_den // bd
        cache: dict[tuple[int, tuple[tuple[bool, int], ...]], list[int]] = {}
        new: list[list[int]] = []
        nz: dict[int, list[int] | None] = {}
        for wrow, (bb,) in zip(w, b):
            groups: dict[int, Terms] = {}
            few: list[tuple[int, int]] = []  # mostly zero inputs (one-hot units): at non-zeros
            for j, x in enumerate(wrow):
                if x:
                    if j not in nz:
                        idx = [k for k, v in enumerate(rows[j]) if v]
                        nz[j] = idx if 4 * len(idx) < size else None
                    if nz[j] is None:
                        groups.setdefault(abs(x) * fw, []).append((x > 0, j))
                    else:
                        few.append((x * fw, j))
            acc: list[int] | None = None
            for mag, terms in sorted(groups.items()):
                key = (mag, tuple(terms))
                if key not in cache:
                    cache[key] = _combine(rows, terms, mag)
                acc = cache[key] if acc is None else list(map(add, acc, cache[key]))
            acc = [0] * size if acc is None else acc
            if few:
                acc = list(acc)  # a cached sum may be shared
                for c, j in few:
                    r, where = rows[j], nz[j]
                    assert where is not None  # few holds the inputs with few non-zeros
                    for k in where:
                        acc[k] += c * r[k]
            new.append(list(map((bb * fb).__add__, acc)) if bb else acc)
            tick()
        rows, changed, den = new, out_den != den, out_den
        if changed:
            g = den
            for r in rows:
                for x in r:
                    g = gcd(g, x)
                    if g == 1:
                        break
            if g > 1:
                rows, den = [[x // g for x in r] for r in rows], den // g
    return normalize(list(zip(*rows)) if rows else [() for _ in cols], den)


def project(maps: Sequence[Map], cols: Sequence[Col]
            ) -> tuple[list[Col], list[int], list[Map]] | None:
    """A block reads its input only through the first map's non-zero weight columns: the
    distinct restrictions of ``cols`` to them, each column's slot among those, and the maps
    with the first one restricted (``None`` when every column is read)."""
    (rows, wd), bias = maps[0]
    support = [j for j in range(len(rows[0])) if any(r[j] for r in rows)] if rows else []
    if not support or len(support) == len(rows[0]) or len(cols) < 2:
        return None
    table: dict[Col, int] = {}
    if len(support) == 1:
        j = support[0]
        slots = [table.setdefault((c[j],), len(table)) for c in cols]
    else:
        pick = itemgetter(*support)
        slots = [table.setdefault(pick(c), len(table)) for c in cols]
    first: Map = (([[r[j] for j in support] for r in rows], wd), bias)
    return list(table), slots, [first, *maps[1:]]


def _block(maps: Sequence[Map], cols: Sequence[Col], den: int, tick: Tick
           ) -> tuple[list[Col], int]:
    if len(maps) == 2 and len(maps[0][0][0][0]) == 1 and len(maps[0][0][0]) >= SWEEP_MIN_HIDDEN:
        out, out_den = _sweep(maps[0], maps[1], cols, den)
        tick(len(maps[0][0][0][0]) + len(maps[1][0][0]))
    elif len(maps) > 1 and (len(cols[0]) == 1 if cols else False):
        out, out_den = piecewise.evaluate(maps, cols, den, tick=tick)
        out, out_den = normalize(out, out_den)
    elif len(maps) > 1 and len(maps[0][0][0]) == 1:  # one scalar after the first map
        x, x_den = affine(maps[0][0], maps[0][1], cols, den)
        tick(1)
        out, out_den = piecewise.evaluate(maps[1:], x, x_den, relu_first=True, tick=tick)
        out, out_den = normalize(out, out_den)
    else:
        out, out_den = _dense(maps, cols, den, tick)
    return out, out_den


def feedforward(layer: Layer, cols: list[Col], den: int, tick: Tick = no_tick
                ) -> tuple[list[Col], int]:
    """A feed-forward block on every column; ``tick(k)`` counts output rows done.  The block
    runs once per distinct restriction of the input to what its first map reads."""
    maps = layer["maps"]
    narrow = project(maps, cols)
    if narrow is None:
        out, out_den = _block(maps, cols, den, tick)
    else:
        sub, slots, first = narrow
        part, out_den = _block(first, sub, den, tick)
        out = [part[k] for k in slots]
    if layer["residual"]:
        m = _lcm(out_den, den)
        out, out_den = normalize(scaled_sum(out, m // out_den, cols, m // den), m)
    return out, out_den


def subset(cols: Sequence[Col], index: Index, positions: Iterable[int]
           ) -> tuple[list[int], list[Col]]:
    """The distinct column ids at ``positions`` of every sequence, and those columns."""
    ids = sorted({seq[p] for seq in index for p in positions})
    return ids, [cols[j] for j in ids]


def _apply_on(mat: Matrix, bias: Matrix, den: int, ids: list[int], sub: list[Col]
              ) -> tuple[dict[int, Col], int]:
    """``affine`` on the columns ``ids`` only, as a ``{column id: column}`` map."""
    out, out_den = affine(mat, bias, sub, den)
    return dict(zip(ids, out)), out_den


def scaled_sum(a: Sequence[Col], fa: int, b: Sequence[Col], fb: int) -> list[Col]:
    """``fa * a[i] + fb * b[i]`` elementwise over two lists of columns."""
    if fa == 1 and fb == 1:
        return [tuple(map(add, x, y)) for x, y in zip(a, b)]
    return [tuple(x * fa + y * fb for x, y in zip(u, v)) for u, v in zip(a, b)]


def attention(layer: Layer, cols: list[Col], den: int, index: Index, queries: list[int],
              tick: Tick = no_tick) -> State:
    """Column-wise attention (eq. 2) at positions ``queries``; returns the new state.

    The rule is :mod:`.net_attention`'s: the keys of each query, every key weighed equally
    by a head with zero scores, the tied maximal scores under hardmax (weight split
    uniformly; a positive score scale changes no comparison), ``W_O W_V`` and the bias shift
    ``W_O b_V + b_O``.  Softmax with non-zero scores: softmax_check.py.  Values, keys and
    queries are computed only on the columns that occur at key (query) positions.
    ``tick()`` is called once per head and sequence.
    """
    n = len(index[0])
    keysets = key_sets(layer, n, queries)
    kids, ksub = subset(cols, index, key_positions(keysets))
    per_head: list[tuple[list[Col], int]] = []
    for h, head in enumerate(layer["heads"]):
        zero = weighs_equally(layer, h)
        ov = value_output(head)
        vals, vden = _apply_on(ov, zero_bias(ov[0]), den, kids, ksub)
        if not zero:
            kk, _ = _apply_on(head["key"], bias_or_zero(head, "key_bias", head["key"]), den,
                              kids, ksub)
            qq, _ = _apply_on(head["query"], bias_or_zero(head, "query_bias", head["query"]),
                              den, *subset(cols, index, queries))
        rows: list[Col] = []
        counts: list[int] = []
        for seq in index:
            tick()
            sums: dict[tuple[int, ...], Col] = {}
            for q in queries:
                ks = keysets[q]
                kv = [vals[seq[p]] for p in ks]
                if zero:
                    key = tuple(ks)
                    if key not in sums:
                        sums[key] = kv[0] if len(kv) == 1 else \
                            tuple(map(sum, zip(*kv)))
                    rows.append(sums[key])
                    counts.append(len(ks))
                    continue
                qc = qq[seq[q]]
                ties = [kv[j] for j in tied([sum(map(mul, kk[seq[p]], qc)) for p in ks])]
                rows.append(ties[0] if len(ties) == 1 else
                            tuple(map(sum, zip(*ties))))
                counts.append(len(ties))
        L = 1  # the lcm of the tie counts that occur, not of 1..#keys
        for c in set(counts):
            L = _lcm(L, c)
        if L > 1:
            rows = [tuple(x * (L // c) for x in r) for r, c in zip(rows, counts)]
        per_head.append((rows, bounded(vden * L)))
    out, out_den = per_head[0]
    for part, d in per_head[1:]:
        m = _lcm(out_den, d)
        out, out_den = scaled_sum(out, m // out_den, part, m // d), m
    shift = head_shift(layer["heads"])
    if shift is not None:
        sv, sd = shift
        m = _lcm(out_den, sd)
        out = scaled_sum(out, m // out_den, [tuple(sv)] * len(out), m // sd)
        out_den = m
    if layer["residual"]:
        base = [cols[seq[q]] for seq in index for q in queries]
        m = _lcm(out_den, den)
        out, out_den = scaled_sum(out, m // out_den, base, m // den), m
    out, out_den = normalize(out, out_den)
    new_cols, new_index = restate(out, index, queries, n)
    return new_cols, out_den, new_index
