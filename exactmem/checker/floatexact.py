"""The float-exact claim: IEEE evaluation with a P-bit significand gives the exact result.

The checker replays the network in the float mirror's order of operations (the torch and
ONNX exports; docs/float-exact.md): every affine map is ``x @ W.T + b``; attention computes
``v = W_V x``, then (hardmax) the scores ``k . q`` and the sum of the values of the tied keys
divided by their count, or (uniform) the sum of all values divided by the number of keys,
then ``W_O``; heads are added in turn, then the residual.  Every weight and input must be a
float of the format, and every sum ``t_1 + ... + t_m`` (a dot product with its bias, a sum of
values, of heads, a residual) must satisfy

    |t_1| + ... + |t_m| < 2^P u,   u = 2^-k the unit of a dyadic grid holding every t_i,

so every product, every partial sum in any order (fused or not) and the result are multiples
of ``u`` below ``2^P u``: floats, and each operation is exact.  A division must have a float
as its exact quotient (IEEE division then returns it).  The grid must lie in the format's
*normal* range: ``u`` at least the smallest normal ``2^emin`` and ``2^P u`` at most the
overflow threshold, and every value a normal float.  Then every non-zero value, product and
partial sum is a normal float, so flushing subnormals to zero (FTZ/DAZ on CPUs, the default
on GPUs and in AVX512_BF16 dot products) changes nothing.  The bound holds in any format with
at least ``P`` significand bits and at least this exponent range, so bfloat16 and float16
weights accumulated in float32 (torch and onnxruntime matmuls) are covered as well.

Cost: a bound is tried first and the sums are checked one by one only where it fails -- per
row of an affine map ``|b| + sum |w_j| max|x_j|``, for the sum of values of a zero-score head
``#keys * max|v|`` per coordinate, for a residual ``max|a| + max|b|`` per coordinate (each
bounds every sum it covers, so passing it proves them all).  With one key the quotient is
the value itself, already a float of the grid.

Two claims store the weight matrices in a narrower format than the arithmetic (``CLAIMS``):
``bfloat16-weights/float32`` (every weight-matrix entry a normal bfloat16, 8 significand
bits; biases, embedding table, activations and sums by the float32 rule: bf16 weights upcast
in a float32 matmul) and ``int8`` (every weight-matrix entry an integer in ``[-128, 127]``;
biases, embedding table, inputs and activations integers below ``2^31``; every sum
``sum |terms| < 2^31`` on the integer grid: int8 x int32 products accumulated in int32, in
any order, never overflow, so integer kernels give the exact value).
"""

from collections.abc import Iterable, Sequence
from math import gcd
from operator import add, sub
from typing import Any

from .net_attention import key_positions, key_sets, restate, tied, weighs_equally, zero_bias
from .net_forward import Col, Index, Map, State, normalize, project, subset
from .parse import Layer, Matrix, extended

# significand bits P, exponent emin of the smallest normal (2^emin; nothing smaller is
# admitted: subnormals may be flushed to zero), exponent bound hi (2^hi overflows)
FORMATS: dict[str, tuple[int, int, int]] = {
    "bfloat16": (8, -126, 128), "float16": (11, -14, 16), "float32": (24, -126, 128),
    "float64": (53, -1022, 1024)}
#: the int32 accumulator: the grid is the integers (unit 2^0), every value below 2^31
INT32: tuple[int, int, int, bool] = (31, 0, 31, True)
#: claim -> (format of the weight matrices, format of everything else)
CLAIMS = {**{f: (f, f) for f in FORMATS}, "bfloat16-weights/float32": ("bfloat16", "float32"),
          "int8": ("int8", "int32")}
#: a format as the checks read it: ``(P, emin, hi)`` as in :data:`FORMATS`, then whether
#: the grid is the integers, then the claim's weight format (a name, ``"int8"`` included)
Fmt = tuple[int, int, int] | tuple[int, int, int, bool] | tuple[int, int, int, bool, str]
SUBNORMAL = "below the smallest normal 2^{} (a subnormal, which hardware may flush to zero)"


class NotExact(Exception):
    """An operation whose float result may differ from the exact one."""


def _log2(den: int, where: str) -> int:
    if den & (den - 1):
        raise NotExact(f"{where}: a value that is not dyadic (denominator {den})")
    return den.bit_length() - 1


def _limit(den: int, fmt: Fmt, where: str) -> int:
    """``2^P``, the bound for sums on the grid ``1/den``, once the grid fits the format."""
    p, lo, hi = fmt[:3]
    k = _log2(den, where)
    if _integer(fmt) and k:
        raise NotExact(f"{where}: a value on the grid 2^-{k}, not an integer")
    if -k < lo:
        raise NotExact(f"{where}: the grid unit 2^-{k} is {SUBNORMAL.format(lo)}")
    if p - k > hi:
        raise NotExact(f"{where}: sums on the grid 2^-{k} may reach 2^{p - k}, past the "
                       f"format's overflow threshold 2^{hi}")
    return 1 << p


def _ieee_value(num: int, den: int, fmt: Fmt, where: str) -> tuple[int, int]:
    """``num / den`` as ``(num, den)`` reduced, after checking that it is zero or a normal
    float: at most ``P`` significant bits, ``2^emin <= |value| < 2^hi``."""
    g = gcd(num, den)
    num, den = num // g, den // g
    if _integer(fmt) and den != 1:
        raise NotExact(f"{where}: {num}/{den} is not an integer")
    if num:
        k = _log2(den, where)
        tz = (num & -num).bit_length() - 1
        top = abs(num).bit_length() - 1 - k  # |value| lies in [2^top, 2^(top+1))
        if top < fmt[1]:
            raise NotExact(f"{where}: a value of magnitude 2^{top} is {SUBNORMAL.format(fmt[1])}")
        if abs(num) >> tz >= 1 << fmt[0] or top >= fmt[2]:
            raise NotExact(f"{where}: a value with a {abs(num).bit_length()}-bit numerator over "
                           f"2^{k} is not a float of the format")
    return num, den


def _integer(fmt: Fmt) -> bool:
    return len(fmt) > 3 and bool(fmt[3])


def _weight(x: int, den: int, fmt: Fmt, where: str) -> None:
    """Check one weight-matrix entry against the claim's weight format ``fmt[4]``."""
    name = fmt[4] if len(fmt) > 4 else None
    if name != "int8":
        _ieee_value(x, den, FORMATS[name] if name else fmt, where)
        return
    g = gcd(x, den)
    if den // g != 1 or not -128 <= x // g <= 127:
        raise NotExact(f"{where}: a weight {x}/{den} is not an int8 integer in [-128, 127]")


def _bounded(terms: Sequence[int], lim: int, where: str) -> int:
    """``sum(terms)``, after checking ``sum |terms| < lim``."""
    if sum(map(abs, terms)) >= lim:
        raise NotExact(f"{where}: a sum exceeds 2^P units of its grid")
    return sum(terms)


def _sum(vectors: Sequence[Sequence[int]], den: int, fmt: Fmt, where: str) -> Col:
    """The coordinate-wise sum of integer vectors over ``den``, within the bound."""
    lim = _limit(den, fmt, where)
    return tuple(_bounded([v[r] for v in vectors], lim, where) for r in range(len(vectors[0])))


def _tops(groups: Iterable[Sequence[Sequence[int]]]) -> list[int]:
    """Per coordinate, the largest ``|x|`` over every vector of every group."""
    tops: list[int] = []
    for vectors in groups:
        if vectors:
            top = [max(max(coord), -min(coord)) for coord in zip(*vectors)]
            tops = top if not tops else list(map(max, tops, top))
    return tops


def _sums_within(groups: Sequence[Sequence[Sequence[int]]], count: int, den: int, fmt: Fmt,
                 where: str) -> bool:
    """True when every sum of ``count`` terms, the i-th drawn from ``groups[i]`` (one group:
    from it each time), is within the bound: ``sum_i max|group_i| < 2^P`` per coordinate
    (a bound that holds for every such sum, so no sum need be checked on its own)."""
    lim = _limit(den, fmt, where)
    if len(groups) == 1:
        return all(count * t < lim for t in _tops(groups))
    return all(sum(ts) < lim for ts in zip(*(_tops([g]) for g in groups)))


def _axpy(acc: list[int], c: int, x: Sequence[int], idx: list[int] | None) -> list[int]:
    """``acc + c * x`` elementwise; ``idx``: the indices where ``x`` is non-zero, when few."""
    if idx is None:
        if c == 1:
            return list(map(add, acc, x))
        if c == -1:
            return list(map(sub, acc, x))
        return list(map(add, acc, map(c.__mul__, x)))
    for i in idx:
        acc[i] += c * x[i]
    return acc


def _affine_rows(mat: Matrix, bias: Matrix, xs: Sequence[Sequence[int]], den: int, fmt: Fmt,
                 where: str) -> tuple[list[Col], int]:
    """``W x + b`` on row-major values ``xs`` (one list per coordinate, over all columns):
    floats as weights, each dot product within the bound.  A row passes at once when
    ``|b| + sum |w_j| max |x_j|`` is below it, else its ``sum |terms|`` is summed per column.
    Inputs that are mostly zero (one-hot indicators) are visited at their non-zeros only."""
    (w, wd), (b, bd) = mat, bias
    for r in w:
        for x in r:
            _weight(x, wd, fmt, where)
    for r in b:
        for x in r:
            _ieee_value(x, bd, fmt, where)
    out_den = max(wd * den, bd)  # both are powers of two once the weights are floats
    lim = _limit(out_den, fmt, where)
    fw, fb = out_den // (wd * den), out_den // bd
    size = len(xs[0]) if xs else 0
    top: dict[int, int] = {}
    nz: dict[int, list[int] | None] = {}
    mags: dict[int, list[int]] = {}
    out: list[Col] = []
    for row, (bb,) in zip(w, b):
        terms = [(j, x * fw) for j, x in enumerate(row) if x]
        for j, _ in terms:
            if j not in top:
                mags[j] = list(map(abs, xs[j]))
                top[j] = max(mags[j], default=0)
                idx = [i for i, x in enumerate(xs[j]) if x]
                nz[j] = idx if 4 * len(idx) < size else None
        if abs(bb * fb) + sum(abs(c) * top[j] for j, c in terms) >= lim:
            mag = [abs(bb * fb)] * size
            for j, c in terms:
                mag = _axpy(mag, abs(c), mags[j], nz[j])
            if max(mag, default=0) >= lim:
                raise NotExact(f"{where}: a sum exceeds 2^P units of its grid")
        val = [bb * fb] * size
        for j, c in terms:
            val = _axpy(val, c, xs[j], nz[j])
        out.append(tuple(val))
    return normalize(out, out_den)


def _affine(mat: Matrix, bias: Matrix, cols: Sequence[Col], den: int, fmt: Fmt, where: str
            ) -> tuple[list[Col], int]:
    """:func:`_affine_rows` on a list of columns."""
    rows, out_den = _affine_rows(mat, bias, [list(r) for r in zip(*cols)], den, fmt, where)
    return list(zip(*rows)) if rows else [() for _ in cols], out_den


def _lift(cols: list[Col], den: int, to: int) -> list[Col]:
    if to == den:
        return cols
    f = (to // den).__mul__
    return [tuple(map(f, c)) for c in cols]


def _attention(la: Layer, cols: list[Col], den: int, index: Index, queries: list[int],
               fmt: Fmt, where: str) -> State:
    """One attention layer in the float mirror's order; returns the new state.  The keys,
    the heads with zero scores and the tied maximal scores are :mod:`.net_attention`'s
    rule; the values are ``W_V x``, divided by the count of the keys weighed, then ``W_O``.
    A head's output depends only on the columns of the keys it averages, so each distinct
    tuple of them is checked once (``groups``)."""
    n = len(index[0])
    keysets = key_sets(la, n, queries)  # no causal mask here: extended() refuses one
    kids, ksub = subset(cols, index, key_positions(keysets))  # only the columns read as keys
    qids, qsub = subset(cols, index, queries)  # ... and as queries
    most = max(len(ks) for ks in keysets.values())
    single = most == 1  # every query weighs one key: its value, unchanged
    outs: list[tuple[list[Col], list[int], int]] = []
    for h, head in enumerate(la["heads"]):
        hw = f"{where}.heads[{h}]"
        zero = weighs_equally(la, h)
        vsub, vden = _affine(head["value"], zero_bias(head["value"][0]), ksub, den, fmt, hw)
        vals = dict(zip(kids, vsub))
        if not zero:
            if la["kind"] == "softmax":
                raise NotExact(f"{hw}: softmax scores are not float-exact")
            qc, qden = _affine(head["query"], zero_bias(head["query"][0]), qsub, den, fmt, hw)
            kc, kden = _affine(head["key"], zero_bias(head["key"][0]), ksub, den, fmt, hw)
            qq, kk = dict(zip(qids, qc)), dict(zip(kids, kc))
            slim = _limit(qden * kden, fmt, hw + " scores")
        # zero scores: every query sums the values of its keys; one bound over all value
        # columns (sum |terms| <= #keys * max |v|) clears every such sum at once
        fast = zero and bool(vsub) and _sums_within([vsub], most, vden, fmt,
                                                    hw + " sum of values")
        groups: dict[tuple[int, ...], int] = {}
        quotients: list[list[tuple[int, int]]] = []
        values: list[Col] = []  # fast and single: the values themselves
        picks: list[int] = []
        for seq in index:
            for q in queries:
                ties = keysets[q]
                if not zero:  # hardmax
                    ties = [ties[j] for j in tied([
                        _bounded([a * b for a, b in zip(kk[seq[p]], qq[seq[q]])], slim,
                                 hw + " scores") for p in ties])]
                g = tuple(seq[p] for p in ties)
                slot = groups.get(g)
                if slot is None:
                    slot = groups[g] = len(groups)
                    if fast and single:  # a value of the grid: a float, already bounded
                        values.append(vals[g[0]])
                    else:
                        total = tuple(map(sum, zip(*(vals[c] for c in g)))) if fast else \
                            _sum([vals[c] for c in g], vden, fmt, hw + " sum of values")
                        quotients.append([_ieee_value(x, vden * len(g), fmt, hw + " division")
                                          for x in total])
                picks.append(slot)
        if fast and single:
            qden, qcols = vden, values
        else:
            qden = max(d for qt in quotients for _, d in qt)
            qcols = [tuple(x * (qden // d) for x, d in qt) for qt in quotients]
        o, od = _affine(head["output"], zero_bias(head["output"][0]), qcols, qden, fmt, hw)
        outs.append((o, picks, od))
    total_den = max(d for _, _, d in outs)
    if len(outs) == 1:  # one head: its outputs are already bounded floats of the grid
        distinct = _lift(outs[0][0], outs[0][2], total_den)
        res = [distinct[s] for s in outs[0][1]]
    else:
        heads = [[o[s] for s in picks] for o, picks, _ in outs]
        heads = [_lift(hd, d, total_den) for hd, (_, _, d) in zip(heads, outs)]
        distinct = res = [_sum([hd[i] for hd in heads], total_den, fmt, where + " sum of heads")
                          for i in range(len(heads[0]))]
    if la["residual"]:
        m = max(total_den, den)
        base = _lift([cols[seq[q]] for seq in index for q in queries], den, m)
        res = _lift(res, total_den, m)
        if res and _sums_within([_lift(distinct, total_den, m), _lift(qsub, den, m)], 2, m,
                                fmt, where + " residual"):
            res = [tuple(map(add, a, b)) for a, b in zip(res, base)]
        else:
            res = [_sum([a, b], m, fmt, where + " residual") for a, b in zip(res, base)]
        total_den = m
    res, total_den = normalize(res, total_den)
    new_cols, new_index = restate(res, index, queries, n)
    return new_cols, total_den, new_index


def _feedforward(la: Layer, cols: list[Col], den: int, fmt: Fmt, where: str
                 ) -> tuple[list[Col], int]:
    """A feed-forward block in the float mirror's order, once per distinct restriction of
    the input to the first map's non-zero weight columns (the weights of the others are
    zeros: exact zero products, no change to any ``sum |terms|``)."""
    maps: Sequence[Map] = la["maps"]
    sub: list[Col] = cols
    slots: list[int] | None = None
    narrow = project(maps, cols)
    if narrow is not None:
        sub, slots, maps = narrow
    rows: Sequence[Sequence[int]] = [list(r) for r in zip(*sub)]
    out_den = den
    for j, (w, b) in enumerate(maps):
        if j:
            rows = [[x if x > 0 else 0 for x in r] for r in rows]
        rows, out_den = _affine_rows(w, b, rows, out_den, fmt, f"{where}.maps[{j}]")
    out: list[Col] = list(zip(*rows)) if rows else [() for _ in sub]
    if slots is not None:
        out = [out[k] for k in slots]
    if la["residual"]:
        m = max(out_den, den)
        out, base = _lift(out, out_den, m), _lift(cols, den, m)
        if out and _sums_within([out, base], 2, m, fmt, where + " residual"):
            out = [tuple(map(add, a, b)) for a, b in zip(out, base)]
        else:
            out = [_sum([a, b], m, fmt, where + " residual") for a, b in zip(out, base)]
        out, out_den = normalize(out, m)
    return out, out_den


def check(net: dict[str, Any], layers: Sequence[Layer], state: State,
          needs: Sequence[list[int]], formats: Iterable[str], final: list[State] | None = None
          ) -> list[str]:
    """One failure line per claimed format the network is not float-exact in.  ``state``:
    the checker's initial ``(cols, den, index)``; ``needs[i]``: the positions layer ``i``
    must produce (as in the exact pass).  ``final`` (a list), if given, receives the last
    state ``(cols, den, index)`` of a format that held: the mirror's values are exact
    rationals of the same function as the exact pass, in another order of operations, so
    they are the network's exact outputs."""
    beyond = extended(layers)
    if beyond:
        return [f"claims.float_exact: the float-exact rule does not cover {beyond}"
                for _ in formats]
    failures = []
    for name in formats:
        wname, aname = CLAIMS[name]
        fmt: Fmt = (*(INT32 if aname == "int32" else FORMATS[aname] + (False,)), wname)
        cols, den, index = state
        try:
            start = 0
            if net["kind"] == "token-ids":
                (rows, tden), start = layers[0]["table"], 1
                for r in rows:
                    for x in r:
                        _ieee_value(x, tden, fmt, "network.layers[0].table")
            for c in cols:
                for x in c:
                    _ieee_value(x, den, fmt, "network input")
            for i in range(start, len(layers)):
                la, where = layers[i], f"network.layers[{i}]"
                if la["type"] == "feedforward":
                    cols, den = _feedforward(la, cols, den, fmt, where)
                else:
                    cols, den, index = _attention(la, cols, den, index, needs[i], fmt, where)
            if final is not None:
                final[:] = [(cols, den, index)]
        except NotExact as exc:
            failures.append(f"claims.float_exact: not exact in {name}: {exc}")
    return failures
