"""The checker's packed products (Kronecker substitution: lm_forward.apply_all and
lm_attention.attention) give exactly the integers of one dot product per output, whatever
the signs, sizes and scales."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker.lm import lm_attention
from exactmem.checker.lm import lm_forward as L
from exactmem.checker.lm.lm_bounds import SLACK, ball


def _draw(seed: int, n: int, k: int, m: int, wbits: int, xbits: int, bias: bool):
    rng = random.Random(seed)

    def num(bits: int) -> int:
        return rng.randint(-(1 << bits), 1 << bits)

    rows = [[num(wbits) for _ in range(m)] for _ in range(k)]
    b = ([[num(wbits) for _ in range(m)]], rng.randint(0, 40)) if bias else None
    lin = L.linear((rows, rng.randint(0, 60)), b)
    ms = [[num(xbits) for _ in range(k)] for _ in range(n)]
    rs = [rng.randint(0, (1 << SLACK) - 1) for _ in range(n)]  # no bits dropped
    return lin, ms, rs


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9),
       st.integers(0, 70), st.integers(0, 200), st.booleans())
def test_apply_all_is_apply_at_every_position(seed, n, k, m, wbits, xbits, bias):
    lin, ms, rs = _draw(seed, n, k, m, wbits, xbits, bias)
    mids, rads = L.apply_all(lin, ms, rs)
    got = [L.apply(lin, x, r) for x, r in zip(ms, rs, strict=True)]
    assert got == list(zip(mids, rads, strict=True))


def test_apply_all_extreme_slots():
    # every midpoint at the largest magnitude, all weights of one sign: the slot bound is tight
    for sign in (1, -1):
        rows = [[sign * 7] * 3 for _ in range(4)]
        lin = L.linear((rows, 0), ([[sign * 5] * 3], 0))
        ms = [[-sign * (1 << 130)] * 4, [sign * (1 << 130)] * 4, [0] * 4]
        mids, _ = L.apply_all(lin, ms, [0, 0, 0])
        assert mids == [L.apply(lin, x, 0)[0] for x in ms]


def _attention_one_dot_at_a_time(qkv, rads, heads, scale):
    """The checker's attention with one integer dot product per score and per output."""
    from operator import mul

    d = len(qkv[0]) // 3
    dh = d // heads
    cm, cr = scale
    two_f = 2 * L.F
    outs = [[0] * d for _ in qkv]
    orads = [0] * len(qkv)
    for h in range(heads):
        q = [row[h * dh:(h + 1) * dh] for row in qkv]
        k = [row[d + h * dh:d + (h + 1) * dh] for row in qkv]
        v = [row[2 * d + h * dh:2 * d + (h + 1) * dh] for row in qkv]
        kn = [sum(map(abs, x)) for x in k]
        vmax = [max(map(abs, x)) for x in v]
        for p in range(len(qkv)):
            qp, rp, qn = q[p], rads[p], sum(map(abs, q[p]))
            scores, srad = [], 0
            for j in range(p + 1):
                dot = sum(map(mul, qp, k[j]))
                drad = rp * kn[j] + rads[j] * qn + dh * rp * rads[j]
                scores.append((dot * cm) >> two_f)
                srad = max(srad, -(-(abs(dot) * cr + drad * (cm + cr)) >> two_f) + 1)
            weights = lm_attention.softmax_weights(scores, srad, L.F)
            assert weights is not None
            am, ar = zip(*(ball(lo, hi) for lo, hi in weights), strict=True)
            for c in range(dh):
                outs[p][h * dh + c] = sum(a * v[j][c] for j, a in enumerate(am)) >> L.F
            rad = sum(a * vm for a, vm in zip(ar, vmax, strict=False)) + sum(
                (a + b) * rads[j] for j, (a, b) in enumerate(zip(am, ar, strict=True)))
            orads[p] = max(orads[p], -(-rad >> L.F) + 1)
    return outs, orads


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 7), st.sampled_from([(4, 1), (4, 2), (6, 3)]),
       st.integers(L.F - 8, L.F + 4))
def test_packed_attention_is_one_dot_at_a_time(seed, n, shape, bits):
    rng = random.Random(seed)
    d, heads = shape
    qkv = [[rng.randint(-(1 << bits), 1 << bits) for _ in range(3 * d)] for _ in range(n)]
    rads = [rng.randint(0, 1 << 40) for _ in range(n)]
    scale = L.constants(d // heads)["scale"]
    assert lm_attention.attention(qkv, rads, heads, scale, L.F) == _attention_one_dot_at_a_time(
        qkv, rads, heads, scale)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(1, 6), st.integers(1, 6),
       st.integers(0, 60), st.integers(60, 140))
def test_apply_all_with_dropped_bits_contains_every_point(seed, n, k, m, wbits, rbits):
    """With radii large enough that midpoint bits are dropped, the output balls still hold
    ``x W + b`` (exact rationals) for points at the corners and inside the input balls."""
    from fractions import Fraction

    rng = random.Random(seed)
    lin, ms, _ = _draw(seed, n, k, m, wbits, 150, True)
    rs = [rng.randint(1 << (rbits - 1), 1 << rbits) for _ in range(n)]
    mids, rads = L.apply_all(lin, ms, rs)
    cols, bias, e, _, _ = lin
    one = Fraction(1, 1 << L.F)
    for p in range(n):
        for _ in range(4):
            t = [Fraction(rng.choice((-1, 1, 0, rng.uniform(-1, 1)))) for _ in ms[p]]
            x = [(mi + ti * rs[p]) * one for mi, ti in zip(ms[p], t, strict=True)]
            for j, c in enumerate(cols):
                y = sum(xi * Fraction(w, 1 << e) for xi, w in zip(x, c, strict=True)) \
                    + Fraction(bias[j], 1 << (e + L.F))
                assert abs(y - mids[p][j] * one) <= rads[p] * one
        assert rads[p] <= -(-(rs[p] + rs[p] // (1 << (SLACK - 2))) * lin[3] // (1 << e)) + 1
