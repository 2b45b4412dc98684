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
integer comparisons only) and zeroes one side.  The outputs are then evaluated at every
point.  The arithmetic is that of the row-major pass, done once per piece instead of once
per point; a Lemma C.1 network's block rows are constant on each block, so its cost follows
the number of blocks, not of points.
"""

from bisect import bisect_left, bisect_right
from math import gcd
from operator import add, sub

from .parse import lcm


def _lcm(a, b):
    return lcm(a, b)  # refused beyond parse.MAX_DEN_BITS


def _refine(starts, values, cuts, where):
    """A row's per-piece ``values`` on the finer pieces ``cuts`` (every start is a cut);
    ``where[id(starts)]``: the piece of ``starts`` each cut lies in."""
    if cuts is starts or where is None:  # equal pieces
        return values
    return [values[k] for k in where[id(starts)]]


def _refinement(terms, cache):
    """The common refinement of the rows' pieces and, per distinct ``starts`` list, the
    piece each cut lies in; shared by every row of a map that reads the same lists
    (``cache``, one map's: the lists are alive while it runs)."""
    lists = {id(r[0]): r[0] for _, r in terms}
    key = tuple(sorted(lists))
    hit = cache.get(key)
    if hit is None:
        cuts = sorted(set().union(*lists.values()))
        hit = cache[key] = (cuts, {k: [bisect_right(st, c) - 1 for c in cuts]
                                   for k, st in lists.items()})
    return hit


def _compact(starts, a, b, size):
    """Drop empty pieces and join neighbours with equal coefficients."""
    keep: list = []
    last = len(starts) - 1
    for p in range(len(starts)):
        if (starts[p + 1] if p < last else size) == starts[p]:
            continue
        if keep and b[keep[-1]] == b[p] and (a is None or a[keep[-1]] == a[p]):
            continue
        keep.append(p)
    if len(keep) == len(starts):
        return starts, a, b
    return ([starts[p] for p in keep], None if a is None else [a[p] for p in keep],
            [b[p] for p in keep])


def relu(row, xs):
    """``max(0, row)`` on the points ``xs`` (sorted numerators): each piece splits at most
    once, where ``a x + b`` changes sign."""
    starts, a, b = row
    if a is None:
        return starts, None, [v if v > 0 else 0 for v in b]
    size = len(xs)
    s2, a2, b2 = [], [], []
    for p, st in enumerate(starts):
        end = starts[p + 1] if p + 1 < len(starts) else size
        ap, bp = a[p], b[p]
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
    return _compact(s2, a2 if any(a2) else None, b2, size)


def _scaled(values, w):
    return values if w == 1 else [w * v for v in values]


def _affine_row(rows, wrow, scale, bias, size, cache):
    """``scale * sum(w * row) + bias`` over the common refinement of the rows read."""
    terms = [(x * scale, rows[j]) for j, x in enumerate(wrow) if x]
    if not terms:
        return [0], None, [bias]
    if len(terms) == 1:
        w, (starts, a, b) = terms[0]
        if w == 1 and not bias:  # a copy: share the row
            return terms[0][1]
        return (starts, None if a is None else _scaled(a, w),
                [w * v + bias for v in b] if bias else _scaled(b, w))
    cuts, merged, where = terms[0][1][0], False, None
    if any(r[0] is not cuts and r[0] != cuts for _, r in terms):
        (cuts, where), merged = _refinement(terms, cache), True
    groups: dict = {}
    for w, row in terms:  # equal |w|: sum the rows first, multiply once (small * big)
        groups.setdefault(abs(w), []).append((w > 0, row))
    a_sum: list | None = None
    b_sum: list = []
    for g, (mag, group) in enumerate(groups.items()):
        ga = gb = None
        for positive, (starts, a, b) in group:
            op = add if positive else sub
            part = _refine(starts, b, cuts, where)
            gb = (part if positive else [-v for v in part]) if gb is None else list(
                map(op, gb, part))
            if a is not None:
                part = _refine(starts, a, cuts, where)
                ga = list(map(op, ga if ga is not None else [0] * len(cuts), part))
        gb = _scaled(gb, mag)
        b_sum = list(map(add, b_sum, gb)) if g else gb
        if ga is not None:
            ga = _scaled(ga, mag)
            a_sum = ga if a_sum is None else list(map(add, a_sum, ga))
    if bias:
        b_sum = [v + bias for v in b_sum]
    if a_sum is not None and not any(a_sum):
        a_sum = None
    return _compact(cuts, a_sum, b_sum, size) if merged else (cuts, a_sum, b_sum)


def _normalize(rows, den):
    g = den
    for _, a, b in rows:
        for v in b if a is None else (*a, *b):
            g = gcd(g, v)
            if g == 1:
                return rows, den
    return [(s, None if a is None else [v // g for v in a], [v // g for v in b])
            for s, a, b in rows], den // g


def evaluate(maps, xs_cols, den, relu_first=False, tick=None):
    """``maps`` (a ReLU network, ReLU between maps) on the scalar columns ``xs_cols``
    (1-tuples over ``den``); ``relu_first``: a ReLU precedes the first map.  Returns the
    output columns and their denominator (not reduced)."""
    order = sorted(range(len(xs_cols)), key=lambda i: xs_cols[i][0])
    xs = [xs_cols[i][0] for i in order]
    size = len(xs)
    if not size:
        return [], den
    rows = [([0], [1], [0])]
    keep = [not relu_first]
    for i, ((w, wd), (b, bd)) in enumerate(maps):
        if i or relu_first:
            rows = [r if k else relu(r, xs) for r, k in zip(rows, keep)]
        keep = [(i > 0 or relu_first) and bb >= 0 and all(x >= 0 for x in wrow)
                for wrow, (bb,) in zip(w, b)]
        out_den = _lcm(wd * den, bd)
        fw, fb = out_den // (wd * den), out_den // bd
        cache: dict = {}
        rows = [_affine_row(rows, wrow, fw, bb * fb, size, cache) for wrow, (bb,) in zip(w, b)]
        if out_den != den:
            rows, out_den = _normalize(rows, out_den)
        pool: dict = {}  # rows on equal pieces share one starts list: no refinement between them
        rows = [(pool.setdefault(tuple(st), st), a, bb) for st, a, bb in rows]
        den = out_den
        if tick is not None:
            tick(len(w))
    values = []
    for starts, a, b in rows:
        vals: list = []
        for p, st in enumerate(starts):
            end = starts[p + 1] if p + 1 < len(starts) else size
            if a is None or a[p] == 0:
                vals += [b[p]] * (end - st)
            else:
                vals += [a[p] * x + b[p] for x in xs[st:end]]
        values.append(vals)
    out: list = [None] * size
    for i, pos in enumerate(order):
        out[pos] = tuple(v[i] for v in values)
    return out, den
