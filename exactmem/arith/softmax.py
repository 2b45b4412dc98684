"""Rigorous rational enclosures of softmax rows.

For scores known to lie in intervals ``s_j in [a_j, b_j]`` the softmax weight
``p_j = exp(s_j) / sum_k exp(s_k)`` is increasing in ``s_j`` and decreasing in every
other ``s_k``, and ``x / (x + y)`` is increasing in ``x > 0`` and decreasing in ``y > 0``.
Hence, with ``L``/``U`` the rigorous lower/upper exp bounds of :mod:`exactmem.arith.expbounds`,

    L(a_j - c) / (L(a_j - c) + sum_{k != j} U(b_k - c))  <=  p_j
    p_j  <=  U(b_j - c) / (U(b_j - c) + sum_{k != j} L(a_k - c))

for any shift ``c`` (we use ``c = max_k a_k``, so arguments are small).  The bounds are then
rounded outward to dyadics with ``precision`` significant bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from exactmem.arith.expbounds import exp_enclosure, round_down, round_up


@dataclass(frozen=True, slots=True)
class SoftmaxEnclosure:
    """``lower[j] <= softmax(s)_j <= upper[j]`` for every ``j``; ``order`` = largest Taylor
    order used, ``precision`` = bits requested."""

    lower: tuple[Fraction, ...]
    upper: tuple[Fraction, ...]
    order: int
    precision: int

    def __post_init__(self) -> None:
        if len(self.lower) != len(self.upper) or not self.lower:
            raise ValueError("a softmax enclosure needs equally many lower and upper bounds")
        for j, (lo, hi) in enumerate(zip(self.lower, self.upper, strict=True)):
            if not 0 <= lo <= hi <= 1:
                raise ValueError(f"entry {j}: invalid bounds [{lo}, {hi}]")

    def width(self) -> Fraction:
        """Largest ``upper - lower`` over the row."""
        return max(hi - lo for lo, hi in zip(self.lower, self.upper, strict=True))


def softmax_enclosure(lower: Sequence[Fraction], upper: Sequence[Fraction] | None = None,
                      precision: int = 64) -> SoftmaxEnclosure:
    """Enclose ``softmax(s)`` for scores ``lower[j] <= s_j <= upper[j]`` (exact if ``upper``
    is omitted).  All inputs are exact rationals; the result is rigorous."""
    lo_s = [Fraction(x) for x in lower]
    hi_s = lo_s if upper is None else [Fraction(x) for x in upper]
    if len(lo_s) != len(hi_s) or not lo_s:
        raise ValueError("softmax needs a non-empty row with as many upper as lower bounds")
    for j, (a, b) in enumerate(zip(lo_s, hi_s, strict=True)):
        if a > b:
            raise ValueError(f"score {j}: lower bound {a} exceeds upper bound {b}")
    n = len(lo_s)
    if n == 1:
        return SoftmaxEnclosure((Fraction(1),), (Fraction(1),), 0, precision)
    c = max(lo_s)
    work = precision + n.bit_length() + 4
    encl_lo = [exp_enclosure(a - c, work) for a in lo_s]
    encl_hi = encl_lo if upper is None else [exp_enclosure(b - c, work) for b in hi_s]
    small = [e.lower for e in encl_lo]  # L(a_k - c)
    big = [e.upper for e in encl_hi]  # U(b_k - c)
    sum_small = sum(small, Fraction(0))
    sum_big = sum(big, Fraction(0))
    los: list[Fraction] = []
    his: list[Fraction] = []
    for j in range(n):
        lo = small[j] / (small[j] + sum_big - big[j])
        hi = big[j] / (big[j] + sum_small - small[j])
        los.append(round_down(lo, precision) if lo > 0 else Fraction(0))
        his.append(min(Fraction(1), round_up(hi, precision)))
    order = max(e.order for e in (*encl_lo, *encl_hi))
    return SoftmaxEnclosure(tuple(los), tuple(his), order, precision)
