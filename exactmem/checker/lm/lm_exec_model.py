"""The execution models of ``claims.execution`` (standard library only): the rounding each
float format allows, as exact rationals (docs/trained-models.md, "Execution claims").

- ``U = 2**-23``: one float32 ulp relative to the value; every ``+ - * /`` and ``sqrt`` is
  within it (round to nearest, or any faithful rounding), so a ``k``-term sum or dot product
  in any order and blocking, fused or not, is within ``gamma_k = k U / (1 - k U)`` of the sum
  of the absolute values of its terms (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 2nd ed., Lemma 3.1 and eq. 3.5);
- ``TINY = 2**-126`` absolute per float32 operation (flush-to-zero, or gradual underflow);
- the storage format: ``float32`` stores what it computes; ``bfloat16`` (``float16``) may
  round every stored value (an activation, a weight used as an operand, any intermediate
  value of an element-wise function) to nearest with relative ``2**-8`` (``2**-11``) and
  absolute ``2**-126`` (``2**-14``: a flushed subnormal); a float32 execution may round a
  weight to float32 (relative ``2**-24``);
- ``exp``, ``tanh``, ``erf`` and ``rsqrt`` within ``ulps`` float32 ulps;
- a stored value must stay below the format's largest finite number (else the position is
  not proved: an overflow to infinity).
"""

from fractions import Fraction
from functools import lru_cache

U = Fraction(1, 1 << 23)
TINY = Fraction(1, 1 << 126)
#: per format: (storage rounding, operand rounding of a weight, storage flush, largest value)
FORMATS = {
    "float32": (Fraction(0), Fraction(1, 1 << 24), TINY, Fraction(1 << 127)),
    "bfloat16": (Fraction(1, 1 << 8), Fraction(1, 1 << 8), TINY, Fraction(1 << 127)),
    "float16": (Fraction(1, 1 << 11), Fraction(1, 1 << 11), Fraction(1, 1 << 14),
                Fraction(65504)),
}
DEFAULT_ULPS = 2
MAX_ULPS = 1 << 16
DYADIC = 64  # bits: error factors are rounded up to multiples of 2**-64


class NotProved(Exception):
    """An execution value may overflow, or an error factor reaches 1/2: no bound."""


def up(x: Fraction) -> Fraction:
    """The least multiple of ``2**-DYADIC`` at or above ``x >= 0`` (keeps denominators small)."""
    return Fraction(-((-x.numerator << DYADIC) // x.denominator), 1 << DYADIC)


@lru_cache(maxsize=4096)
def gamma(k: int) -> Fraction:
    """Higham's ``gamma_k = k U / (1 - k U)`` for ``k U < 1/2``."""
    if 2 * k * U >= 1:
        raise NotProved(f"a sum of {k} terms: k u reaches 1/2")
    return up(k * U / (1 - k * U))


@lru_cache(maxsize=4096)
def grow(a: Fraction, times: int) -> Fraction:
    """An upper bound of ``(1 + a)**times - 1`` (``<= t a / (1 - t a)`` for ``t a < 1``)."""
    ta = times * a
    if 2 * ta >= 1:
        raise NotProved("an error factor reaches 1/2")
    return up(ta / (1 - ta))


class Model:
    """One execution model: format and ulps, and the factors every step uses."""

    def __init__(self, fmt: str, ulps: int) -> None:
        self.fmt, self.ulps = fmt, ulps
        self.s, self.sw, self.tiny_s, self.max = FORMATS[fmt]
        self.rel1 = up((1 + U) * (1 + self.s) - 1)  # one operation, its result stored
        self.abs1 = TINY + self.tiny_s
        self.fn = up(ulps * U)  # exp / tanh / erf / rsqrt
        self.dots: dict[int, Fraction] = {}

    def text(self) -> str:
        return (f"{self.fmt}" + (" storage, float32 accumulation" if self.s else "")
                + f"; any summation order; exp/tanh/erf/rsqrt within {self.ulps} ulps")

    def dot(self, k: int) -> Fraction:
        """Relative factor of a ``k``-term dot product plus a bias: both operands rounded
        to the format, float32 accumulation, the result stored."""
        if k not in self.dots:
            self.dots[k] = up((1 + self.sw) ** 2 * (1 + gamma(k + 1)) * (1 + self.s) - 1)
        return self.dots[k]

    def dot_abs(self, k: int, w1: Fraction | int, xinf: Fraction | int) -> Fraction:
        """Absolute term of that dot product: a flushed operand (``w1 = sum |w|``,
        ``xinf = max |x|``), each product and partial sum flushed, the result stored."""
        return self.tiny_s * (w1 + k * xinf + k) + (2 * k + 3) * TINY + self.tiny_s

    def check(self, bound: Fraction | int, what: str) -> None:
        """``bound`` (a real) below the largest finite value, else :class:`NotProved`."""
        if bound >= self.max:
            raise NotProved(f"{what}: a value up to {bound.numerator // bound.denominator} "
                            f"may overflow {self.fmt}")
