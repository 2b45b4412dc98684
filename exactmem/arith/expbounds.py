"""Rigorous rational bounds of ``exp(q)`` for rational ``q`` (no libm, no float).

For ``0 <= r`` and ``K >= 0`` write ``T_K(r) = sum_{k <= K} r^k / k!`` and
``R_K(r) = r^(K+1) / (K+1)!``.  The two Taylor inequalities used (proved symbolically in
``proofs/lemma_exp_taylor.py``) are

* lower: ``T_K(r) <= exp(r)`` (all terms of the series are non-negative);
* upper: ``exp(r) <= T_K(r) / (1 - R_K(r))`` whenever ``R_K(r) < 1`` (Lagrange remainder:
  ``exp(r) = T_K(r) + exp(xi) R_K(r) <= T_K(r) + exp(r) R_K(r)`` for some ``0 <= xi <= r``).

Argument reduction: ``q > 0`` is written ``q = 2^m r`` with ``0 < r <= 1/2`` and
``exp(q) = exp(r)^(2^m)`` is formed by ``m`` squarings with outward rounding.  Negative
arguments use ``exp(q) = 1 / exp(-q)`` (the reciprocal swaps the bounds).

All work is integer fixed point with ``W`` fractional bits: every series term is rounded
down for the lower bound and up for the upper bound, so the enclosure is rigorous.  The
caller asks for ``precision`` bits; the result is rounded outward to ``precision``
significant bits, so the relative width is about ``2^-precision`` (escalate by raising it).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from exactmem.arith.rational import to_rational

MIN_PRECISION = 2
MAX_PRECISION = 1 << 16


@dataclass(frozen=True, slots=True)
class ExpEnclosure:
    """``lower <= exp(arg) <= upper``, with the Taylor order and reduction depth used."""

    arg: Fraction
    lower: Fraction
    upper: Fraction
    order: int
    reduction: int

    def __post_init__(self) -> None:
        if not 0 < self.lower <= self.upper:
            raise ValueError(f"invalid exp enclosure [{self.lower}, {self.upper}]")


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def round_down(x: Fraction, bits: int) -> Fraction:
    """The largest dyadic ``<= x`` with ``bits`` significant bits (``x > 0``)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    s = bits - e
    if s >= 0:
        return Fraction((x.numerator << s) // x.denominator, 1 << s)
    return Fraction(x.numerator // (x.denominator << -s) << -s)


def round_up(x: Fraction, bits: int) -> Fraction:
    """The smallest dyadic ``>= x`` with ``bits`` significant bits (``x > 0``)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    s = bits - e
    if s >= 0:
        return Fraction(_ceil_div(x.numerator << s, x.denominator), 1 << s)
    return Fraction(_ceil_div(x.numerator, x.denominator << -s) << -s)


def reduction_depth(a: int, b: int) -> int:
    """Smallest ``m >= 0`` with ``a / (b 2^m) <= 1/2`` (``a, b > 0``)."""
    m = 0
    while 2 * a > (b << m):
        m += 1
    return m


def taylor_fixed(a: int, bm: int, w: int) -> tuple[int, int, int]:
    """Fixed-point bounds (scale ``2^w``) of ``exp(a / bm)`` for ``0 <= a/bm <= 1/2``.

    Returns ``(lo, hi, K)``: ``lo / 2^w <= exp(r) <= hi / 2^w`` with Taylor order ``K``.
    Terms are summed until the rounded-up next term is at most one unit.
    """
    one = 1 << w
    lo = hi = 0
    t_lo = t_hi = one
    k = 0
    while True:
        lo += t_lo
        hi += t_hi
        k += 1
        t_lo = t_lo * a // (bm * k)
        t_hi = _ceil_div(t_hi * a, bm * k)  # upper bound of R_{k-1}(r) * 2^w
        if t_hi <= 1:
            break
    order = k - 1
    # t_hi >= R_K(r) * 2^w, and t_hi <= 1 < one, so 1 - R_K(r) >= (one - t_hi) / one > 0
    hi = _ceil_div(hi * one, one - t_hi)
    return lo, hi, order


@lru_cache(maxsize=1 << 18)
def _exp_cached(q: Fraction, precision: int) -> ExpEnclosure:
    if q == 0:
        return ExpEnclosure(q, Fraction(1), Fraction(1), 0, 0)
    if q < 0:
        pos = _exp_cached(-q, precision)
        return ExpEnclosure(q, round_down(1 / pos.upper, precision),
                            round_up(1 / pos.lower, precision), pos.order, pos.reduction)
    a, b = q.numerator, q.denominator
    m = reduction_depth(a, b)
    w = precision + 2 * m + 8
    lo, hi, order = taylor_fixed(a, b << m, w)
    for _ in range(m):
        lo = (lo * lo) >> w
        hi = _ceil_div(hi * hi, 1 << w)
    return ExpEnclosure(q, round_down(Fraction(lo, 1 << w), precision),
                        round_up(Fraction(hi, 1 << w), precision), order, m)


def exp_enclosure(q: object, precision: int = 64) -> ExpEnclosure:
    """Rigorous dyadic bounds ``lower <= exp(q) <= upper`` for an exact rational ``q``.

    ``precision`` (bits) sets the Taylor order and the working precision; the relative
    width of the enclosure is about ``2^-precision`` (times a small factor).
    """
    if not MIN_PRECISION <= precision <= MAX_PRECISION:
        raise ValueError(f"precision must be in [{MIN_PRECISION}, {MAX_PRECISION}], "
                         f"found {precision}")
    return _exp_cached(to_rational(q, "exp argument"), precision)


def exp_bounds(q: object, precision: int = 64) -> tuple[Fraction, Fraction]:
    """``(lower, upper)`` with ``lower <= exp(q) <= upper`` (see :func:`exp_enclosure`)."""
    enc = exp_enclosure(q, precision)
    return enc.lower, enc.upper
