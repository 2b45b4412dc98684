"""Rigorous code lengths and memorized bits from logit balls (standard library only).

The code length of a label ``y`` under the model's softmax is ``-log2 p_y`` with
``p_y = e**l_y / sum_j e**l_j``, so ``-log2 p_y = log2 sum_j e**(l_j - l_y)``, which is
increasing in every ``l_j`` (``j != y``) and decreasing in ``l_y``: for logit balls
``(m_j, r)`` (units ``2**-F``) it is at most ``log2 sum_j e**((m_j - m_y + 2 r) / 2**F)``
(docs/memorized-bits.md).  Every step rounds upward:

- each exponent ``(m_j - m_y + 2r)`` is rounded up to ``2**-P`` and bounded above by
  :func:`lm_bounds.exp` (``P = 64`` fractional bits);
- ``log2 S`` of the sum ``S >= 1``: ``S = 2**e * m`` with ``m`` in ``[1, 2)``,
  ``ln m = 2 atanh(z)``, ``z = (m - 1) / (m + 1)`` in ``[0, 1/3)``, by the series
  ``sum_k z**(2k+1) / (2k+1)`` (all terms positive; each power floored or ceiled, so the
  partial sums are directed; the tail after ``K`` terms is at most
  ``z**(2K+1) / ((2K+1)(1 - z**2)) <= 9/8 z**(2K+1) / (2K+1)``), and
  ``ln 2 = 2 atanh(1/3)`` bounded the same way; ``log2 m = ln m / ln 2`` with the directed
  ends.

The reference entropy of ``n`` tokens drawn uniformly from ``V`` is ``n log2 V``, bounded
below by the same logarithm.
"""

from fractions import Fraction

from . import lm_bounds
from .lm_bounds import cdiv

P = 64  # fractional bits of code lengths
GUARD = 16


def _atanh_sum(zl: int, zh: int, p: int) -> tuple[int, int]:
    """Bounds of ``2**p * sum_k z**(2k+1)/(2k+1)`` for ``zl <= z * 2**p <= zh``,
    ``z <= 1/3``."""
    one = 1 << p
    lo = hi = 0
    pl, ph = zl, zh
    sl, sh = (zl * zl) >> p, cdiv(zh * zh, one)
    k = 0
    while True:
        lo += pl // (2 * k + 1)
        hi += cdiv(ph, 2 * k + 1)
        k += 1
        pl, ph = (pl * sl) >> p, cdiv(ph * sh, one)
        if ph < 2:
            break
    return lo, hi + cdiv(9 * ph, 8 * (2 * k + 1)) + 1


def _ln_mantissa(mn: int, md: int, p: int) -> tuple[int, int]:
    """Bounds of ``2**p * ln(mn / md)`` for ``1 <= mn / md <= 2``."""
    zl = ((mn - md) << p) // (mn + md)
    zh = cdiv((mn - md) << p, mn + md)
    lo, hi = _atanh_sum(zl, zh, p)
    return 2 * lo, 2 * hi


def _ln2(p: int) -> tuple[int, int]:
    return _ln_mantissa(2, 1, p)


def log2_bounds(num: int, den: int) -> tuple[int, int]:
    """Bounds ``(lo, hi)`` of ``2**P * log2(num / den)`` for integers ``num >= den > 0``."""
    e = num.bit_length() - den.bit_length()
    if num < den << e:
        e -= 1  # now den * 2**e <= num < den * 2**(e+1)
    mn, md = num, den << e
    if e < 0:
        mn, md = num << -e, den
    q = P + GUARD
    llo, lhi = _ln_mantissa(mn, md, q)
    t2lo, t2hi = _ln2(q)
    return (e << P) + (llo << P) // t2hi, (e << P) + cdiv(lhi << P, t2lo)


EXP_LIMIT = 1024  # natural-log units: a larger exponent is bounded in the log domain


def position_upper(mids: list[int], rad: int, y: int, f: int) -> int:
    """Upper bound (units ``2**-P``) of ``-log2 p_y`` for every logit vector in the ball
    ``(mids, rad)`` at ``2**-f``, ``f >= P``.

    Each exponent ``x_j = m_j - m_y + 2r`` is rounded up to ``2**-P``; when every ``x_j`` is
    at most :data:`EXP_LIMIT`, the bound is ``log2 sum_j e**x_j`` with each ``e**x_j``
    bounded above.  A larger exponent (a label far below a rival) would build an integer of
    about ``1.44 x`` bits, so then ``X = max_j x_j`` is factored out in the log domain:
    ``log2 sum_j e**x_j = X log2 e + log2 sum_j e**(x_j - X)``, every exponent of the sum
    ``<= 0`` and its term for the maximum exactly 1; ``log2 e = 1 / ln 2`` bounded above
    with :func:`_ln2` at ``P + 2 GUARD`` bits.  Either way the work is that of exponents at
    most :data:`EXP_LIMIT` and of products of the logits' own size."""
    shift = f - P
    top = mids[y] - 2 * rad
    xs = [cdiv(m - top, 1 << shift) for m in mids]
    big = max(xs)
    if big <= EXP_LIMIT << P:
        total = 0
        for x in xs:
            total += lm_bounds.exp(x, P)[1]
        return log2_bounds(total, 1 << P)[1]
    total = 0
    for x in xs:
        total += lm_bounds.exp(x - big, P)[1]
    q = P + 2 * GUARD
    ln2_lo = _ln2(q)[0]  # ln 2 >= ln2_lo / 2**q, so log2 e <= 2**q / ln2_lo
    return cdiv(big << q, ln2_lo) + log2_bounds(total, 1 << P)[1]


def reference_lower(n: int, vocab: int) -> int:
    """Lower bound (units ``2**-P``) of ``n log2 V``, the entropy of ``n`` uniform tokens."""
    return n * log2_bounds(vocab, 1)[0]


def below_uniform(claimed: list[tuple[int, int]], h_lo: int) -> tuple[
        Fraction, Fraction, Fraction, int, Fraction]:
    """From the claimed code lengths ``(p, q)`` of the distinct sequences (already proved
    upper bounds) and the uniform code's lower bound ``h_lo`` per sequence (units
    ``2**-P``): exact rationals ``(clipped, unclipped, code, count, uniform)``: the sums of
    ``max(0, H - C_i)`` and of ``H - C_i`` (lower bounds), of ``C_i`` (an upper bound), the
    number of sequences and ``count * H`` (a lower bound)."""
    clipped, unclipped = memorized(claimed, h_lo)
    code = sum((Fraction(p, q) for p, q in claimed), Fraction(0))
    return clipped, unclipped, code, len(claimed), Fraction(h_lo * len(claimed), 1 << P)


def memorized(claimed: list[tuple[int, int]], h_lo: int) -> tuple[Fraction, Fraction]:
    """From the claimed per-sequence code lengths ``(p, q)`` (already proved upper bounds)
    and the entropy lower bound ``h_lo`` (units ``2**-P``): the exact rational lower bounds
    ``(clipped, unclipped)`` of the memorized bits as ``(numerator, denominator)`` pairs,
    clipped = ``sum_i max(0, H - C_i)``."""
    h = Fraction(h_lo, 1 << P)
    per = [h - Fraction(p, q) for p, q in claimed]
    clipped = sum((max(Fraction(0), x) for x in per), Fraction(0))
    unclipped = sum(per, Fraction(0))
    return clipped, unclipped
