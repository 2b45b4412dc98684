"""The checker's interval forward pass, for networks with softmax attention (stdlib only).

Used when a softmax head has non-zero scores (its outputs are irrational).  Activations are
midpoint-radius intervals: integer tuples ``mid``, ``rad >= 0`` over one denominator.  Exact
layers act exactly on intervals; softmax rows are enclosed by :mod:`.softmax_bounds` at the
certificate's ``hints.softmax.precision`` (the checker does not escalate).  A read position
is accepted when the label is forced: argmax - the label's lower bound beats every other
class's upper bound; scalar - the whole interval lies within ``hints.softmax.epsilon`` of
the label.  The claim must be the label.
"""

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from . import net_forward as forward
from .net_attention import (
    bias_or_zero,
    head_shift,
    key_sets,
    restate,
    separated,
    value_output,
    weighs_equally,
    zero_bias,
)
from .net_forward import Col, Index, State, Tick
from .parse import Layer, Matrix, integer, lcm, matrix, obj, ratio, show
from .softmax_bounds import grid, softmax_row
from .verdict import Unusable

MAX_PRECISION = 1 << 12
Intervals = tuple[list[Col], list[Col], int]  # (mids, radii >= 0, their denominator)


class Undecided(Exception):
    """A hardmax comparison on intervals cannot be decided."""


def needed(layers: Sequence[Layer]) -> bool:
    """True when some softmax attention layer has a head with non-zero scores."""
    return any(la["type"] == "attention" and la["kind"] == "softmax" and not all(la["zero_scores"])
               for la in layers)


def _lcm(a: int, b: int) -> int:
    return lcm(a, b)  # refused beyond parse.MAX_DEN_BITS


def _affine(mat: Matrix, bias: Matrix, mids: Sequence[Col], rads: Sequence[Col], den: int
            ) -> Intervals:
    (w, wd), (b, bd) = mat, bias
    out_den = _lcm(wd * den, bd)
    fw, fb = out_den // (wd * den), out_den // bd
    om = [tuple(sum(x * c[j] for j, x in enumerate(row)) * fw + r[0] * fb
                for row, r in zip(w, b)) for c in mids]
    orr = [tuple(sum(abs(x) * c[j] for j, x in enumerate(row)) * fw for row in w) for c in rads]
    return om, orr, out_den


def _add(a: Intervals, b: Intervals) -> Intervals:
    """Sum of two (mids, rads, den) lists column by column."""
    m = _lcm(a[2], b[2])
    fa, fb = m // a[2], m // b[2]
    mids = [tuple(x * fa + y * fb for x, y in zip(p, q)) for p, q in zip(a[0], b[0])]
    rads = [tuple(x * fa + y * fb for x, y in zip(p, q)) for p, q in zip(a[1], b[1])]
    return mids, rads, m


def _feedforward(la: Layer, mids: list[Col], rads: list[Col], den: int) -> Intervals:
    om, orr, od = mids, rads, den
    for i, (w, b) in enumerate(la["maps"]):
        if i:
            lo = [tuple(max(m - r, 0) for m, r in zip(p, q)) for p, q in zip(om, orr)]
            hi = [tuple(max(m + r, 0) for m, r in zip(p, q)) for p, q in zip(om, orr)]
            om = [tuple(x + y for x, y in zip(p, q)) for p, q in zip(lo, hi)]
            orr = [tuple(y - x for x, y in zip(p, q)) for p, q in zip(lo, hi)]
            od *= 2
        om, orr, od = _affine(w, b, om, orr, od)
    if la["residual"]:
        om, orr, od = _add((om, orr, od), (mids, rads, den))
    return om, orr, od


def _attention(la: Layer, mids: list[Col], rads: list[Col], den: int, index: Index,
               queries: list[int], bits: int, tick: Tick
               ) -> tuple[list[Col], list[Col], int, Index]:
    """One attention layer on intervals at positions ``queries``: the keys, the uniform
    weights of a head with zero scores, ``W_O W_V`` and the bias shift are
    :mod:`.net_attention`'s; a softmax row is enclosed by :func:`.softmax_row` on the score
    intervals, and a hardmax head must have a separated winner (:func:`.separated`;
    :class:`Undecided` otherwise: intervals cannot show a tie)."""
    n = len(index[0])
    keysets = key_sets(la, n, queries)
    counts = 1  # uniform weights: one denominator for every key count (causal prefixes)
    for ks in keysets.values():
        counts = _lcm(counts, len(ks))
    wbits = bits + 8
    parts: list[Intervals] = []
    for h, head in enumerate(la["heads"]):
        zero = weighs_equally(la, h)
        ov = value_output(head)
        vm, vr, vden = _affine(ov, zero_bias(ov[0]), mids, rads, den)
        if not zero:
            qm, qr, qden = _affine(head["query"], bias_or_zero(head, "query_bias", head["query"]),
                                   mids, rads, den)
            km, kr, kden = _affine(head["key"], bias_or_zero(head, "key_bias", head["key"]),
                                   mids, rads, den)
            scale = Fraction(*head["scale"])
        om: list[Col] = []
        orr: list[Col] = []
        wden = 2 << wbits
        dim = len(ov[0])
        for seq in index:
            tick()
            for q in queries:
                keys = keysets[q]
                ws: list[tuple[int, int]]
                if zero:
                    ws = [(2 << wbits, 0)] * len(keys)
                else:
                    a, ar = qm[seq[q]], qr[seq[q]]
                    sm, sr = [], []
                    for p in keys:
                        b, br = km[seq[p]], kr[seq[p]]
                        sm.append(sum(x * y for x, y in zip(b, a)))
                        sr.append(sum(abs(x) * yr + xr * abs(y) + xr * yr
                                      for x, xr, y, yr in zip(b, br, a, ar)))
                    sden = qden * kden
                    wden = 2 << wbits
                    if la["kind"] == "softmax":
                        row = softmax_row([Fraction(x - r, sden) * scale for x, r in zip(sm, sr)],
                                          [Fraction(x + r, sden) * scale for x, r in zip(sm, sr)],
                                          bits + 16)
                        ws = [grid(lo, hi, wbits) for lo, hi in row]
                    else:
                        top = separated([x - r for x, r in zip(sm, sr)],
                                        [x + r for x, r in zip(sm, sr)])
                        if top is None:
                            raise Undecided("hardmax on intervals: no separated winner")
                        ws = [(wden if j == top else 0, 0) for j in range(len(keys))]
                mid, rad = [0] * dim, [0] * dim
                for (wm, wr), p in zip(ws, keys):
                    cm, cr = vm[seq[p]], vr[seq[p]]
                    for r in range(dim):
                        mid[r] += wm * cm[r]
                        rad[r] += wm * cr[r] + wr * abs(cm[r]) + wr * cr[r]
                if zero:
                    f = counts // len(keys)
                    mid, rad = [x * f for x in mid], [x * f for x in rad]
                om.append(tuple(mid))
                orr.append(tuple(rad))
        if zero:
            wden = (2 << wbits) * counts
        parts.append((om, orr, vden * wden))
    total = parts[0]
    for part in parts[1:]:
        total = _add(total, part)
    shift = head_shift(la["heads"])
    if shift is not None:
        count = len(total[0])
        total = _add(total, ([tuple(shift[0])] * count, [tuple(0 for _ in shift[0])] * count,
                             shift[1]))
    if la["residual"]:
        base = ([mids[seq[q]] for seq in index for q in queries],
                [rads[seq[q]] for seq in index for q in queries], den)
        total = _add(total, base)
    pairs, new_index = restate(zip(total[0], total[1]), index, queries, n)
    return [m for m, _ in pairs], [r for _, r in pairs], total[2], new_index


def _settings(hints: dict[str, Any], readout: dict[str, Any]
              ) -> tuple[int, Fraction, Any]:
    if "softmax" not in hints:
        raise Unusable("hints.softmax: a softmax network needs the precision hint")
    h = obj(hints["softmax"], "hints.softmax", ("precision",),
            ("taylor_order", "epsilon", "readout"))
    bits = integer(h["precision"], "hints.softmax.precision", 2, MAX_PRECISION)
    if "taylor_order" in h:
        integer(h["taylor_order"], "hints.softmax.taylor_order", 0)
    if "epsilon" in h and readout["kind"] != "scalar":
        raise Unusable("hints.softmax.epsilon: only for a scalar readout")
    eps = Fraction(*ratio(h["epsilon"], "hints.softmax.epsilon")) if "epsilon" in h \
        else Fraction(0)
    if eps < 0:
        raise Unusable("hints.softmax.epsilon: must be >= 0")
    return bits, eps, h.get("readout")


def _readout_hint(hint: Any, width: int, count: int, layers: Sequence[Layer]
                  ) -> tuple[list[int], Matrix]:
    """``hints.softmax.readout``: the ``columns`` of the features and the rational
    ``preconditioner`` of the exact-readout claim (docs/softmax.md)."""
    obj(hint, "hints.softmax.readout", ("columns", "preconditioner"))
    last = layers[-1] if layers else None
    if last is None or last["type"] != "feedforward" or len(last["maps"]) != 1 or \
            last["residual"] or len(last["maps"][0][0][0]) != 1:
        raise Unusable("hints.softmax.readout: the network must end in a linear scalar readout")
    cols: list[int] = hint["columns"]
    if type(cols) is not list or len(cols) != count:
        raise Unusable(f"hints.softmax.readout.columns: {count} feature columns expected, "
                       "one per read position")
    for j, c in enumerate(cols):
        integer(c, f"hints.softmax.readout.columns[{j}]", 0, width - 1)
        if j and c <= cols[j - 1]:
            raise Unusable("hints.softmax.readout.columns: strictly increasing")
    return cols, matrix(hint["preconditioner"], "hints.softmax.readout.preconditioner",
                        count, count)


def _nonsingular(rows: Sequence[tuple[Col, Col]], den: int, cols: Sequence[int], pre: Matrix
                 ) -> str | None:
    """``||I - C A||_inf < 1`` for every ``A`` within the bounds (rows of ``(mid, rad)``
    over ``den``, restricted to ``cols``): then every such ``A`` is non-singular."""
    (c, cden), size = pre, len(cols)
    one = cden * den
    for r in range(size):
        total = 0
        for k in range(size):
            m = sum(c[r][t] * rows[t][0][cols[k]] for t in range(size))
            rad = sum(abs(c[r][t]) * rows[t][1][cols[k]] for t in range(size))
            total += abs((one if r == k else 0) - m) + rad
        if total >= one:
            return f"row {r}: the bound on |I - C A| is {show(Fraction(total, one))} >= 1"
    return None


def label_gap(labels: Sequence[Any], task: str) -> int:
    """The smallest gap between distinct labels (1 when there is only one label): a scalar
    output within less than half of it of a label identifies that label."""
    flat = labels if task == "next-token" else [y for ys in labels for y in ys]
    values: list[int] = sorted(set(flat))
    return min((b - a for a, b in zip(values, values[1:])), default=1)


def enclose(net: dict[str, Any], layers: Sequence[Layer], readout: dict[str, Any],
            state: State, bits: int, tick: Tick) -> tuple[list[Col], list[Col], int, Index]:
    """The interval forward pass: ``(mids, rads, den, index)`` after ``layers``."""
    cols, den, index = state
    mids, rads = list(cols), [tuple(0 for _ in c) for c in cols]
    needs = forward.needed_positions(layers, readout["positions"], net["n"])
    for i in range(1 if net["kind"] == "token-ids" else 0, len(layers)):
        la = layers[i]
        exact = not any(x for c in rads for x in c)
        if la["type"] == "feedforward":
            mids, rads, den = _feedforward(la, mids, rads, den)
            tick(sum(len(w[0]) for w, _ in la["maps"]))
        elif exact and (la["kind"] != "softmax" or all(la["zero_scores"])):
            mids, den, index = forward.attention(la, mids, den, index, needs[i], tick=tick)
            rads = [tuple(0 for _ in c) for c in mids]
        else:
            mids, rads, den, index = _attention(la, mids, rads, den, index, needs[i], bits, tick)
    return mids, rads, den, index


def check(hints: dict[str, Any], net: dict[str, Any], layers: Sequence[Layer],
          readout: dict[str, Any], task: str, labels: Sequence[Any], claims: Sequence[Any],
          state: State, tick: Tick, ids: Sequence[int]
          ) -> tuple[list[str], int, Fraction, bool]:
    """``(failures, precision, epsilon, readout claimed)`` of the rigorous check (no
    failures = every read position within ``epsilon`` or forced, or, with the readout hint,
    an exact real readout exists).  ``state`` = the checker's initial ``(cols, den, index)``
    of the sequences checked, whose indices are ``ids``; ``tick`` counts
    progress.  The caller checks epsilon against the label gap."""
    bits, eps, hint = _settings(hints, readout)
    if hint is not None:
        count = len(claims) * len(readout["positions"])
        cols, pre = _readout_hint(hint, len(layers[-1]["maps"][0][0][0][0]) if layers and
                                  layers[-1]["type"] == "feedforward" else 0, count, layers)
        try:
            mids, rads, den, index = enclose(net, layers[:-1], readout, state, bits, tick)
        except Undecided as exc:
            return [f"network: {exc}"], bits, eps, True
        failures: list[str] = [
            f"sequence {i}, readout: claim {c!r} is not the label"
            for i, claim, lab in zip(ids, claims, labels)
            for c, y in zip(claim, [lab] if task == "next-token" else lab) if c != str(y)]
        rows = [(mids[seq[p]], rads[seq[p]]) for seq in index for p in readout["positions"]]
        why = _nonsingular(rows, den, cols, pre)
        if why:
            failures.append(f"hints.softmax.readout: the features are not proved to admit an "
                            f"exact readout at precision {bits}: {why}")
        return failures, bits, eps, True
    try:
        mids, rads, den, index = enclose(net, layers, readout, state, bits, tick)
    except Undecided as exc:
        return [f"network: {exc}"], bits, eps, False
    failures = []
    for i, seq, claim, lab in zip(ids, index, claims, labels):
        labs = [lab] if task == "next-token" else lab
        for p, y, c in zip(readout["positions"], labs, claim):
            where = f"sequence {i}, position {p}, readout"
            mid, rad = mids[seq[p]], rads[seq[p]]
            if c != str(y):
                failures.append(f"{where}: claim {c!r} is not the label {y}")
            if readout["kind"] == "argmax":
                lo_y = mid[y] - rad[y] if y < len(mid) else None
                if lo_y is None or any(mid[k] + rad[k] >= lo_y for k in range(len(mid)) if k != y):
                    failures.append(f"{where}: the bounds do not force class {y} at "
                                    f"precision {bits}")
            else:
                dev = abs(Fraction(mid[0], den) - y) + Fraction(rad[0], den)
                if dev > eps:
                    failures.append(f"{where}: |output - {y}| exceeds epsilon {show(eps)} "
                                    f"at precision {bits}")
    return failures, bits, eps, False
