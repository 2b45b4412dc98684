"""Property tests of the rigorous exp bounds (exactmem.arith.expbounds)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import exp_bounds, exp_enclosure
from exactmem.arith.expbounds import round_down, round_up, taylor_fixed

rationals = st.fractions(min_value=-60, max_value=60, max_denominator=1000)
precisions = st.integers(min_value=4, max_value=200)


def _taylor(q: Fraction, k: int) -> Fraction:
    term, total = Fraction(1), Fraction(0)
    for i in range(k + 1):
        total += term
        term = term * q / (i + 1)
    return total


@settings(max_examples=150, deadline=None)
@given(rationals, precisions)
def test_lower_le_upper_and_width(q: Fraction, p: int) -> None:
    lo, hi = exp_bounds(q, p)
    assert 0 < lo <= hi
    assert (hi - lo) / lo <= Fraction(8, 2 ** p)


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=0, max_value=20, max_denominator=500), precisions)
def test_against_independent_taylor_sums(q: Fraction, p: int) -> None:
    """Any Taylor partial sum is a lower bound, so it can never exceed our upper bound;
    a long partial sum with its remainder bound brackets our lower bound."""
    lo, hi = exp_bounds(q, p)
    assert _taylor(q, 5) <= hi
    k = 80
    rem = q ** (k + 1) / _factorial(k + 1)
    assume_ok = rem < 1
    if assume_ok:
        assert lo <= _taylor(q, k) / (1 - rem)


def _factorial(k: int) -> int:
    out = 1
    for i in range(2, k + 1):
        out *= i
    return out


@settings(max_examples=100, deadline=None)
@given(rationals, rationals, precisions)
def test_monotone(a: Fraction, b: Fraction, p: int) -> None:
    """a <= b implies exp(a) <= exp(b): lo(a) <= hi(b) always, and once b - a exceeds the
    enclosure widths both bounds are ordered too."""
    if a > b:
        a, b = b, a
    lo_a, hi_a = exp_bounds(a, p)
    lo_b, hi_b = exp_bounds(b, p)
    assert lo_a <= hi_b
    if b - a > Fraction(4096, 2 ** p):
        assert hi_a <= hi_b and lo_a <= lo_b


@settings(max_examples=80, deadline=None)
@given(rationals, st.integers(min_value=4, max_value=120))
def test_tightening_with_precision(q: Fraction, p: int) -> None:
    lo1, hi1 = exp_bounds(q, p)
    lo2, hi2 = exp_bounds(q, 2 * p)
    # both enclose exp(q), hence they intersect; the finer one is (much) narrower
    assert max(lo1, lo2) <= min(hi1, hi2)
    assert hi2 - lo2 <= hi1 - lo1


@settings(max_examples=80, deadline=None)
@given(rationals, precisions)
def test_reciprocal_symmetry(q: Fraction, p: int) -> None:
    lo, hi = exp_bounds(q, p)
    nlo, nhi = exp_bounds(-q, p)
    assert lo * nlo <= 1 <= hi * nhi


@settings(max_examples=80, deadline=None)
@given(st.fractions(min_value=0, max_value=Fraction(1, 2), max_denominator=1000),
       st.integers(min_value=8, max_value=100))
def test_taylor_fixed_order_grows_with_precision(r: Fraction, w: int) -> None:
    lo, hi, k = taylor_fixed(r.numerator, r.denominator, w)
    assert lo <= hi
    lo2, hi2, k2 = taylor_fixed(r.numerator, r.denominator, w + 40)
    assert k2 >= k
    assert Fraction(lo, 2 ** w) <= Fraction(hi2, 2 ** (w + 40))
    assert Fraction(lo2, 2 ** (w + 40)) <= Fraction(hi, 2 ** w)
    # the higher order encloses more tightly
    assert Fraction(hi2 - lo2, 2 ** (w + 40)) <= Fraction(hi - lo, 2 ** w)


@settings(max_examples=60, deadline=None)
@given(st.fractions(min_value=0, max_value=Fraction(1, 2), max_denominator=1000))
def test_taylor_inequalities_tighten_with_order(r: Fraction) -> None:
    """The exact inequality family used: lower T_K increases, upper T_K/(1-R_K) decreases in K,
    and every lower stays below every upper."""
    lows, highs = [], []
    for k in range(0, 25):
        t = _taylor(r, k)
        rem = r ** (k + 1) / _factorial(k + 1)
        lows.append(t)
        highs.append(t / (1 - rem))
    assert lows == sorted(lows) and highs == sorted(highs, reverse=True)
    assert max(lows) <= min(highs)


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10 ** 9), max_value=10 ** 9), st.integers(2, 80))
def test_dyadic_rounding(x: Fraction, bits: int) -> None:
    d, u = round_down(x, bits), round_up(x, bits)
    assert d <= x <= u
    assert u - d <= 2 * x / 2 ** (bits - 1)


def test_known_values() -> None:
    lo, hi = exp_bounds(0, 30)
    assert lo == hi == 1
    # e is in (2.71828, 2.71829)
    lo, hi = exp_bounds(1, 40)
    assert Fraction(271828, 100000) < lo <= hi < Fraction(271829, 100000)
    enc = exp_enclosure("-3/2", 64)
    assert enc.order > 5 and enc.reduction == 2


def test_refuses_float_and_bad_precision() -> None:
    with pytest.raises(TypeError):
        exp_bounds(0.5)
    with pytest.raises(ValueError):
        exp_bounds(1, 1)
