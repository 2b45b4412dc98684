"""Exact numbers: rationals, scaled integer matrices (and, later, rigorous bounds for exp)."""

from exactmem.arith.rational import bit_length, format_rational, to_rational
from exactmem.arith.scaled import ScaledMatrix

__all__ = ["ScaledMatrix", "bit_length", "format_rational", "to_rational"]
