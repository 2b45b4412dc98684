"""A feed-forward block that reads one scalar, evaluated piece by piece (standard library).

Sort the scalar inputs ``x_0 <= ... <= x_{T-1}`` (integers over one denominator).  On a run of
consecutive points every unit of a ReLU network of ``x`` is one affine function ``a x + b``
until some ReLU switches, so a row is stored as *pieces*: ``starts[p]`` (first point of piece
``p``) and ``coefs[p] = (a, b)``, the value at point ``i`` of the piece being
``(a * x_i + b) / den`` with one denominator per layer.

An affine map adds rows on the common refinement of their pieces; a ReLU splits a piece at
the first point where ``a x + b`` changes sign (``a x + b`` is monotone in ``x``: one
bisection, integer comparisons only) and zeroes one side.  The outputs are then evaluated
at every point.  The arithmetic is the exact arithmetic of the row-major pass, done once
per piece instead of once per point; a Lemma C.1 network's block rows are constant on each
block, so its cost follows the number of blocks, not of points.
"""

from bisect import bisect_left, bisect_right
from math import gcd


def _lcm(a, b):
    return a * b // gcd(a, b)


def _refine(starts, coefs, cuts):
    """The coefficients of a row on the finer pieces ``cuts`` (each start of ``starts``
    is a cut)."""
    if cuts is starts:
        return coefs
    out, k, last = [], 0, len(starts) - 1
    for c in cuts:
        while k < last and starts[k + 1] <= c:
            k += 1
        out.append(coefs[k])
    return out


def _compact(starts, coefs, size):
    """Drop empty pieces and join neighbours with equal coefficients."""
    s2: list = []
    c2: list = []
    for i, (st, cf) in enumerate(zip(starts, coefs)):
        end = starts[i + 1] if i + 1 < len(starts) else size
        if st == end:
            continue
        if c2 and c2[-1] == cf:
            continue
        s2.append(st)
        c2.append(cf)
    return s2, c2


def relu(row, xs):
    """``max(0, row)`` on the points ``xs`` (sorted numerators): each piece splits at most
    once, where ``a x + b`` changes sign."""
    starts, coefs = row
    size = len(xs)
    s2, c2 = [], []
    for i, (st, (a, b)) in enumerate(zip(starts, coefs)):
        end = starts[i + 1] if i + 1 < len(starts) else size
        if a == 0:
            s2.append(st)
            c2.append((0, b) if b > 0 else (0, 0))
        elif a > 0:  # a x + b > 0 exactly for x > floor(-b / a)
            cut = bisect_right(xs, -b // a, st, end)
            s2 += [st, cut]
            c2 += [(0, 0), (a, b)]
        else:  # x < ceil(b / -a)
            cut = bisect_left(xs, -(-b // -a), st, end)
            s2 += [st, cut]
            c2 += [(a, b), (0, 0)]
    return _compact(s2, c2, size)


def _affine_row(rows, wrow, scale, bias, size):
    """``scale * sum(w * row) + bias`` over the common refinement of the rows read."""
    terms = [(x * scale, rows[j]) for j, x in enumerate(wrow) if x]
    if not terms:
        return [0], [(0, bias)]
    if len(terms) == 1:
        w, (starts, coefs) = terms[0]
        return starts, [(w * a, w * b + bias) for a, b in coefs]
    first = terms[0][1][0]
    if all(r[0] is first for _, r in terms):
        cuts = first
    else:
        cuts = sorted(set().union(*(r[0] for _, r in terms)))
    a_sum, b_sum = [0] * len(cuts), [bias] * len(cuts)
    for w, (starts, coefs) in terms:
        for p, (a, b) in enumerate(_refine(starts, coefs, cuts)):
            if a:
                a_sum[p] += w * a
            if b:
                b_sum[p] += w * b
    return _compact(cuts, list(zip(a_sum, b_sum)), size)


def _normalize(rows, den):
    g = den
    for _, coefs in rows:
        for a, b in coefs:
            g = gcd(gcd(g, a), b)
            if g == 1:
                return rows, den
    return [(s, [(a // g, b // g) for a, b in c]) for s, c in rows], den // g


def evaluate(maps, xs_cols, den, relu_first=False, tick=None):
    """``maps`` (a ReLU network, ReLU between maps) on the scalar columns ``xs_cols``
    (1-tuples over ``den``); ``relu_first``: a ReLU precedes the first map.  Returns the
    output columns and their denominator (not reduced)."""
    order = sorted(range(len(xs_cols)), key=lambda i: xs_cols[i][0])
    xs = [xs_cols[i][0] for i in order]
    size = len(xs)
    if not size:
        return [], den
    rows = [([0], [(1, 0)])]
    keep = [not relu_first]
    for i, ((w, wd), (b, bd)) in enumerate(maps):
        if i or relu_first:
            rows = [r if k else relu(r, xs) for r, k in zip(rows, keep)]
        keep = [(i > 0 or relu_first) and bb >= 0 and all(x >= 0 for x in wrow)
                for wrow, (bb,) in zip(w, b)]
        out_den = _lcm(wd * den, bd)
        fw, fb = out_den // (wd * den), out_den // bd
        rows = [_affine_row(rows, wrow, fw, bb * fb, size) for wrow, (bb,) in zip(w, b)]
        if out_den != den:
            rows, out_den = _normalize(rows, out_den)
        den = out_den
        if tick is not None:
            tick(len(w))
    values = []
    for starts, coefs in rows:
        vals = [0] * size
        for p, (a, b) in enumerate(coefs):
            end = starts[p + 1] if p + 1 < len(starts) else size
            for i in range(starts[p], end):
                vals[i] = a * xs[i] + b if a else b
        values.append(vals)
    out: list = [None] * size
    for i, pos in enumerate(order):
        out[pos] = tuple(v[i] for v in values)
    return out, den
