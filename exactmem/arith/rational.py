"""Exact rational scalars: parsing, formatting and the no-float rule.

Every number that enters the certified path goes through :func:`to_rational`.
Floats are refused with :class:`~exactmem.errors.NotExactError`: the text form
``"p/q"`` (or an ``int``) is the only way to write a non-integer.
"""

from __future__ import annotations

import re
from fractions import Fraction
from numbers import Rational

from exactmem.errors import NotExactError

_RATIONAL_RE = re.compile(r"^\s*([+-]?\d+)\s*(?:/\s*(\d+)\s*)?$")


def to_rational(value: object, where: str = "value") -> Fraction:
    """Return ``value`` as an exact :class:`Fraction`.

    Accepts ``int`` (not ``bool``), ``Fraction`` (and other exact rationals such as
    gmpy2 ``mpq``/``mpz`` or sympy ``Rational``) and strings ``"p"`` / ``"p/q"``.
    ``where`` names the offending field in the error message.
    """
    if isinstance(value, bool):
        raise NotExactError(f"{where}: expected an integer or a 'p/q' string, found a boolean")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Fraction):
        return value
    if isinstance(value, float):
        raise NotExactError(
            f"{where}: found the float {value!r}; write numbers as integers or 'p/q' strings"
        )
    if isinstance(value, str):
        match = _RATIONAL_RE.match(value)
        if match is None:
            raise NotExactError(f"{where}: expected an integer or a 'p/q' string, found {value!r}")
        num = int(match.group(1))
        den = int(match.group(2)) if match.group(2) is not None else 1
        if den == 0:
            raise NotExactError(f"{where}: zero denominator in {value!r}")
        return Fraction(num, den)
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    # gmpy2 and sympy rationals expose numerator/denominator without registering as Rational
    num_attr = getattr(value, "numerator", None)
    den_attr = getattr(value, "denominator", None)
    if num_attr is not None and den_attr is not None and type(value).__name__ in (
        "mpq", "mpz", "Rational", "Integer", "fmpq", "fmpz",
    ):
        return Fraction(int(num_attr), int(den_attr))
    raise NotExactError(
        f"{where}: cannot read {type(value).__name__} {value!r} as an exact rational")


def format_rational(value: Fraction | int) -> str:
    """Canonical text of a rational: ``"p"`` for integers, else reduced ``"p/q"`` with q > 0."""
    if isinstance(value, int):
        return str(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def bit_length(value: Fraction) -> int:
    """Bits to write ``value``: the larger bit length of its reduced numerator and denominator."""
    return max(abs(value.numerator).bit_length(), value.denominator.bit_length())
