"""Binary floating-point formats and exact rounding of rationals into them.

A float is a dyadic rational, so rounding an exact weight to a format is an exact
operation on rationals: :func:`round_to_format` returns the correctly rounded value
(round to nearest, ties to even, IEEE 754 exponent range with subnormals) as a
:class:`~fractions.Fraction`, or ``None`` when it overflows to infinity.  Rounding is done
once, directly from the rational (no double rounding through float64), with gmpy2's MPFR.

``precision`` counts significand bits *including* the implicit leading bit, as MPFR does:
float64 53, float32 24, float16 11, bfloat16 8.  :data:`UNBOUNDED` stands for a ``p``-bit
format with MPFR's (practically unbounded) exponent range, used by the mantissa-bit search.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import gmpy2

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """A binary format: significand bits ``precision`` and MPFR exponent bounds (``None`` =
    MPFR's default range, i.e. no overflow or underflow in practice)."""

    name: str
    precision: int
    emin: int | None = None
    emax: int | None = None

    def __post_init__(self) -> None:
        if self.precision < 2:
            raise SpecError(f"{self.name}: a float format needs at least 2 significand bits, "
                            f"found {self.precision}")

    def context(self) -> gmpy2.context:
        """A gmpy2 context rounding every operation into this format."""
        ctx = gmpy2.context(precision=self.precision, round=gmpy2.RoundToNearest)
        if self.emin is not None and self.emax is not None:
            ctx.emin, ctx.emax = self.emin, self.emax
            ctx.subnormalize = True
        return ctx


FLOAT64 = FloatFormat("float64", 53, -1073, 1024)
FLOAT32 = FloatFormat("float32", 24, -148, 128)
FLOAT16 = FloatFormat("float16", 11, -23, 16)
BFLOAT16 = FloatFormat("bfloat16", 8, -132, 128)
FORMATS: dict[str, FloatFormat] = {f.name: f for f in (FLOAT64, FLOAT32, BFLOAT16, FLOAT16)}


def bits(p: int) -> FloatFormat:
    """The ``p``-bit format with an unbounded exponent (the mantissa-bit search)."""
    return FloatFormat(f"p={p}", p)


def to_mpfr(x: Fraction, ctx: gmpy2.context) -> gmpy2.mpfr:
    """``x`` correctly rounded in ``ctx`` (one rounding, from the exact rational)."""
    with gmpy2.context(ctx):
        v = gmpy2.mpfr(gmpy2.mpq(x.numerator, x.denominator))
        return gmpy2.check_range(v) if ctx.subnormalize else v


def mpfr_to_fraction(v: gmpy2.mpfr) -> Fraction | None:
    """The exact dyadic value of a finite mpfr; ``None`` for infinities and NaN."""
    if not gmpy2.is_finite(v):
        return None
    num, den = v.as_integer_ratio()
    return Fraction(int(num), int(den))


def round_to_format(x: Fraction, fmt: FloatFormat) -> Fraction | None:
    """``x`` rounded to nearest (ties to even) in ``fmt``; ``None`` on overflow."""
    return mpfr_to_fraction(to_mpfr(x, fmt.context()))


def significand_bits(x: Fraction) -> int:
    """Bits of significand needed to hold ``x`` exactly (0 for zero); ``-1`` when ``x``
    is not dyadic (no binary float holds it)."""
    if x == 0:
        return 0
    den = x.denominator
    if den & (den - 1):
        return -1
    num = abs(x.numerator)
    return num.bit_length() - ((num & -num).bit_length() - 1)


def rounded_values(m: ScaledMatrix, fmt: FloatFormat) -> list[list[float]]:
    """Entries of ``m`` rounded once into ``fmt``, as Python floats (exact: every value is
    representable in float64); an overflow becomes a signed infinity."""
    if m.den == 1 and all(abs(x) < (1 << fmt.precision) for row in m.num for x in row):
        return [[float(x) for x in row] for row in m.num]  # integers the format holds
    out: list[list[float]] = []
    for row in m.num:
        r: list[float] = []
        for x in row:
            v = round_to_format(Fraction(x, m.den), fmt)
            r.append(float(v) if v is not None else (float("inf") if x > 0 else float("-inf")))
        out.append(r)
    return out
