"""Rigorous exp and softmax bounds for the checker (standard library integers only, no libm).

For ``0 <= r <= 1/2``: ``T_K(r) <= exp(r) <= T_K(r) / (1 - R_K(r))`` with ``T_K`` the Taylor
partial sum and ``R_K(r) = r^(K+1)/(K+1)!`` (proved in ``proofs/lemma_exp_taylor.py``).
Terms are rounded down (lower) or up (upper) on a ``2^-w`` grid.  ``q > 1/2`` is reduced by
``exp(q) = exp(q / 2^m)^(2^m)``; ``q < 0`` by ``exp(q) = 1 / exp(-q)``.  A softmax row
``p_j`` is bounded by ``L_j / (L_j + sum_{k != j} U_k)`` and ``U_j / (U_j + sum_{k != j} L_k)``.
Arguments beyond the cut-off ``|q| > bits`` cost no series: ``0 <= exp(q) <= exp(-bits)`` for
``q < -bits`` (monotonicity), and ``exp(q)`` for ``q > bits`` is bounded above by nothing
(``None``, infinity), which only loosens the row's bounds.  So every argument, however
large, is answered in time polynomial in ``bits``.
"""

from fractions import Fraction


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def exp_bounds(q: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """``(lo, hi)`` Fractions with ``lo <= exp(q) <= hi``; ``bits`` = working precision."""
    if q == 0:
        return Fraction(1), Fraction(1)
    if q < 0:
        below, above = exp_bounds(-q, bits)
        return 1 / above, 1 / below
    a, b = q.numerator, q.denominator
    m = 0
    while 2 * a > (b << m):
        m += 1
    bm, w = b << m, bits + 2 * m + 8
    one = 1 << w
    lo = hi = 0
    t_lo = t_hi = one
    k = 0
    while True:
        lo += t_lo
        hi += t_hi
        k += 1
        t_lo = t_lo * a // (bm * k)
        t_hi = _ceil_div(t_hi * a, bm * k)  # >= R_{k-1}(r) on the grid
        if t_hi <= 1:
            break
    hi = _ceil_div(hi * one, one - t_hi)  # T_K / (1 - R_K), R_K <= t_hi / one < 1
    for _ in range(m):
        lo = (lo * lo) >> w
        hi = _ceil_div(hi * hi, one)
    return Fraction(lo, one), Fraction(hi, one)


def _lower(q: Fraction, bits: int) -> Fraction:
    """A lower bound of ``exp(q)`` for ``q <= 0``: 0 below the cut-off."""
    return Fraction(0) if q < -bits else exp_bounds(q, bits)[0]


def _upper(q: Fraction, bits: int) -> Fraction | None:
    """An upper bound of ``exp(q)``; ``None`` (infinity) above the cut-off."""
    if q > bits:
        return None
    return exp_bounds(max(q, Fraction(-bits)), bits)[1]


def softmax_row(lo_scores: list[Fraction], hi_scores: list[Fraction], bits: int
                ) -> list[tuple[Fraction, Fraction]]:
    """Bounds ``[(lo_j, hi_j)]`` of ``softmax(s)`` for ``lo_scores[j] <= s_j <= hi_scores[j]``."""
    if len(lo_scores) == 1:
        return [(Fraction(1), Fraction(1))]
    c = max(lo_scores)
    small = [_lower(s - c, bits) for s in lo_scores]
    big = [_upper(s - c, bits) for s in hi_scores]
    s_small = sum(small)
    infinite = sum(b is None for b in big)
    s_big = sum(b for b in big if b is not None)
    out: list[tuple[Fraction, Fraction]] = []
    for j in range(len(small)):
        bj = big[j]
        if infinite - (bj is None) > 0:  # another term may dominate
            lo = Fraction(0)
        else:
            lo = small[j] / (small[j] + s_big - (bj or 0))
        hi = Fraction(1) if bj is None else bj / (bj + s_small - small[j])
        out.append((lo, min(hi, Fraction(1))))
    return out


def grid(lo: Fraction, hi: Fraction, bits: int) -> tuple[int, int]:
    """Outward rounding of ``[lo, hi]`` to multiples of ``2^-bits``: ``(mid, rad)`` over
    ``2^(bits+1)`` (integers)."""
    a = (lo.numerator << bits) // lo.denominator
    b = _ceil_div(hi.numerator << bits, hi.denominator)
    return a + b, b - a
