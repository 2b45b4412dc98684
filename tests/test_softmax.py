"""Rigorous softmax enclosures (exactmem.arith.softmax)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import exp_bounds, softmax_enclosure

scores = st.lists(st.fractions(min_value=-30, max_value=30, max_denominator=50),
                  min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(scores, st.integers(min_value=8, max_value=128))
def test_encloses_and_sums(s: list[Fraction], p: int) -> None:
    enc = softmax_enclosure(s, precision=p)
    assert sum(enc.lower) <= 1 <= sum(enc.upper)
    # cross-check with direct exp bounds at a different precision: p_j in
    # [L_j / sum U, U_j / sum L], which must intersect our enclosure
    b = [exp_bounds(x, p + 7) for x in s]
    tot_lo = sum(x[0] for x in b)
    tot_hi = sum(x[1] for x in b)
    for j, (lo, hi) in enumerate(zip(enc.lower, enc.upper, strict=True)):
        assert max(lo, b[j][0] / tot_hi) <= min(hi, b[j][1] / tot_lo)
    assert enc.width() <= Fraction(len(s) * 16, 2 ** p)


@settings(max_examples=60, deadline=None)
@given(scores, st.integers(min_value=8, max_value=64))
def test_interval_scores_widen_and_shift_invariance(s: list[Fraction], p: int) -> None:
    exact = softmax_enclosure(s, precision=p)
    wide = softmax_enclosure([x - 1 for x in s], [x + 1 for x in s], precision=p)
    for j in range(len(s)):
        assert wide.lower[j] <= exact.upper[j] and exact.lower[j] <= wide.upper[j]
    shifted = softmax_enclosure([x + 7 for x in s], precision=p)
    for j in range(len(s)):
        assert max(exact.lower[j], shifted.lower[j]) <= min(exact.upper[j], shifted.upper[j])


def test_equal_scores_give_uniform_and_order_is_reported() -> None:
    enc = softmax_enclosure([Fraction(2)] * 4, precision=40)
    for lo, hi in zip(enc.lower, enc.upper, strict=True):
        assert lo <= Fraction(1, 4) <= hi
    enc = softmax_enclosure([Fraction(5), Fraction(3), Fraction(0)], precision=64)
    assert enc.order >= 10
    assert enc.lower[0] > Fraction(87, 100) and enc.upper[2] < Fraction(6, 1000)


def test_rejects_bad_rows() -> None:
    with pytest.raises(ValueError):
        softmax_enclosure([])
    with pytest.raises(ValueError):
        softmax_enclosure([Fraction(1)], [Fraction(0)])
