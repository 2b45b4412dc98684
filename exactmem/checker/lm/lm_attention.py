"""Causal softmax attention on balls (standard library only), and the Kronecker packing that
computes the products of every position at once (:func:`attention` here,
:func:`lm_forward.apply_all` for the linear maps).

Packing: integers of absolute value below ``half = 2**(8 sb - 1)`` are packed as the slots
of one integer ``sum_p x_p 2**(8 sb p)`` (:func:`pack`); a sum of products of packed
integers by small ones is again packed, and while each slot's total stays below ``half``,
adding ``half`` to every slot makes the slots the base-``2**(8 sb)`` digits of the sum, read
back exactly from its bytes (:func:`unpack`).  The same integers as one product at a time.

Attention (docs/trained-models.md): scores ``q.k`` times a scale ball; score balls;
``e**(s - M)`` bounds at each midpoint widened by ``e**+-r`` (``e**r <= 1 + 2r``, ``e**-r >=
1 - r`` for ``r <= 1``); each weight bounded by ``lo_j / (lo_j + sum_{k != j} hi_k)`` and its
mirror (:func:`softmax_weights`); the weighted sum of the value balls.
"""

from collections.abc import Sequence
from operator import mul

from . import lm_bounds
from .lm_bounds import Degenerate, at_radius, ball, cdiv

Rows = list[list[int]]
Balls = tuple[Rows, list[int]]  # the balls of every position: midpoints, radii (2**-f)


def slots(bound: int) -> tuple[int, int]:
    """``(bytes a slot, half)`` for slots holding integers of absolute value ``<= bound``
    with ``half = 2**(8 bytes - 1) > bound``."""
    sb = -(-(bound.bit_length() + 1) // 8)
    return sb, 1 << (8 * sb - 1)


def ones(n: int, sb: int) -> int:
    """``sum_{p < n} 2**(8 sb p)``."""
    return int.from_bytes((b"\x01" + bytes(sb - 1)) * n, "little")


def pack(values: Sequence[int], sb: int, half: int) -> int:
    """``sum_p values[p] 2**(8 sb p)`` for ``|values[p]| < half``."""
    lifted = int.from_bytes(b"".join((x + half).to_bytes(sb, "little") for x in values),
                            "little")
    return lifted - half * ones(len(values), sb)


def unpack(total: int, n: int, sb: int, half: int) -> list[int]:
    """The ``n`` slots of ``total = sum_p (y_p + half) 2**(8 sb p)`` with ``|y_p| < half``
    (every slot then lies in ``[0, 2**(8 sb))``: the base-``2**(8 sb)`` digits)."""
    raw = total.to_bytes(n * sb, "little")
    return [int.from_bytes(raw[q:q + sb], "little") - half for q in range(0, n * sb, sb)]



def softmax_weights(scores: list[int], r: int, f: int) -> list[tuple[int, int]] | None:
    """Bounds ``(lo, hi)`` (``2**-f``) of the softmax weights of score balls
    ``(scores[j], r)``; None when the radius exceeds 1."""
    one = 1 << f
    if r > one:
        return None
    top = max(scores)
    los, his = [], []
    for s in scores:
        lo, hi = at_radius(lm_bounds.exp, s - top, r, 1, f)  # e**x: 1-Lipschitz, x <= 0
        los.append((lo * (one - r)) >> f)
        his.append(cdiv(hi * (one + 2 * r), one))
    sl, sh = sum(los), sum(his)
    return [(lo * one // (lo + sh - hi), cdiv(hi * one, hi + sl - lo))
            for lo, hi in zip(los, his)]


def attention(qkv: Rows, rads: list[int], heads: int, scale: tuple[int, int], f: int,
              kv_heads: int | None = None) -> Balls:
    """Causal multi-head attention on the rows ``qkv[p]`` = (q, k, v) of every position
    (``q`` of ``heads`` heads, ``k`` and ``v`` of ``kv_heads``, default ``heads``; query head
    ``h`` reads key/value head ``h // (heads / kv_heads)``); scores ``q.k`` times the ball
    ``scale``; returns the concatenated head outputs and their radii per position."""
    kv = kv_heads or heads
    dh = len(qkv[0]) // (heads + 2 * kv)
    d = heads * dh
    n = len(qkv)
    one = 1 << f
    cm, cr = scale
    outs = [[0] * d for _ in qkv]
    orads = [0] * len(qkv)
    for h in range(heads):
        g = h // (heads // kv)
        q = [row[h * dh:(h + 1) * dh] for row in qkv]
        k = [row[d + g * dh:d + (g + 1) * dh] for row in qkv]
        v = [row[d + (kv + g) * dh:d + (kv + g + 1) * dh] for row in qkv]
        kn = [sum(map(abs, x)) for x in k]
        vmax = [max(map(abs, x)) for x in v]
        # packed as in lm_forward.apply_all: the keys of all positions per coordinate, so
        # one product per coordinate gives q_p . k_j for every j; each value row over its
        # coordinates, so one product per j gives sum_j a_j v_j (weights a_j <= 1)
        # a slot holds a packed key coordinate and, after the product, a dot product
        kmax = max(max(map(abs, x)) for x in k)
        ksb, khalf = slots(max(max(max(map(abs, x)) for x in q) * max(kn), kmax))
        kcols = [pack(col, ksb, khalf) for col in zip(*k)]
        klift = khalf * ones(n, ksb)
        vsb, vhalf = slots(n * one * max(vmax))  # covers every value too (n * one >= 1)
        vrows = [pack(row, vsb, vhalf) for row in v]
        vlift = vhalf * ones(dh, vsb)
        for p in range(n):
            qp, rp, qn = q[p], rads[p], sum(map(abs, q[p]))
            dots = unpack(sum(map(mul, qp, kcols), klift), n, ksb, khalf)[:p + 1]
            scores = [(dot * cm) >> 2 * f for dot in dots]
            srad = cdiv(max(abs(dot) * cr + (rp * kn[j] + rads[j] * qn + dh * rp * rads[j])
                            * (cm + cr) for j, dot in enumerate(dots)), 1 << 2 * f) + 1
            weights = softmax_weights(scores, srad, f)
            if weights is None:
                raise Degenerate("attention: a score radius exceeds 1")
            am, ar = zip(*(ball(lo, hi) for lo, hi in weights))
            outs[p][h * dh:(h + 1) * dh] = [
                y >> f for y in unpack(sum(map(mul, am, vrows), vlift), dh, vsb, vhalf)]
            rad = sum(a * vm for a, vm in zip(ar, vmax)) + sum(
                (a + b) * rads[j] for j, (a, b) in enumerate(zip(am, ar)))
            orads[p] = max(orads[p], cdiv(rad, one) + 1)
    return outs, orads
