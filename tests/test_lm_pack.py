"""The checker's packed products (Kronecker substitution) give exactly the integers of one
dot product per output, whatever the signs, sizes and scales."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker import lm_forward as L


def _draw(seed: int, n: int, k: int, m: int, wbits: int, xbits: int, bias: bool):
    rng = random.Random(seed)

    def num(bits: int) -> int:
        return rng.randint(-(1 << bits), 1 << bits)

    rows = [[num(wbits) for _ in range(m)] for _ in range(k)]
    b = ([[num(wbits) for _ in range(m)]], rng.randint(0, 40)) if bias else None
    lin = L.linear((rows, rng.randint(0, 60)), b)
    ms = [[num(xbits) for _ in range(k)] for _ in range(n)]
    rs = [rng.randint(0, 1 << 20) for _ in range(n)]
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
