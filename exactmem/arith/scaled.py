"""Exact matrices as integer numerators over one shared positive denominator.

This is the fast exact representation: a matrix ``A = num / den`` with
``num`` a tuple of integer rows and ``den > 0``.  Arithmetic on many entries then runs
on integers; a ``Fraction`` per element is never stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from exactmem.arith.rational import to_rational
from exactmem.errors import NotExactError, SpecError


@dataclass(frozen=True, slots=True)
class ScaledMatrix:
    """An exact rational matrix ``num / den`` (rows of ints, one positive denominator)."""

    num: tuple[tuple[int, ...], ...]
    den: int = 1
    cols: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.den, int) or isinstance(self.den, bool) or self.den <= 0:
            raise SpecError(f"denominator must be a positive int, found {self.den!r}")
        width = len(self.num[0]) if self.num else max(self.cols, 0)
        if self.cols == -1:
            object.__setattr__(self, "cols", width)
        for i, row in enumerate(self.num):
            if len(row) != self.cols:
                raise SpecError(f"row {i} has {len(row)} entries, expected {self.cols}")
            for x in row:
                if type(x) is not int:
                    if isinstance(x, float):
                        raise NotExactError(f"row {i}: float entry {x!r} in an exact matrix")
                    raise SpecError(f"row {i}: numerator entries must be int, found {type(x)}")

    # construction -----------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Iterable[Iterable[object]], cols: int | None = None) -> ScaledMatrix:
        """Build from rows of exact numbers (ints, Fractions, ``"p/q"`` strings); floats refused."""
        fr = [[to_rational(x, f"matrix entry [{i}][{j}]") for j, x in enumerate(r)]
              for i, r in enumerate(rows)]
        den = 1
        for row in fr:
            for x in row:
                den = den * x.denominator // math.gcd(den, x.denominator)
        num = tuple(tuple(int(x.numerator * (den // x.denominator)) for x in row) for row in fr)
        width = cols if cols is not None else (len(fr[0]) if fr else 0)
        return cls(num, den, width).reduced()

    @classmethod
    def zeros(cls, rows: int, cols: int) -> ScaledMatrix:
        return cls(tuple((0,) * cols for _ in range(rows)), 1, cols)

    @classmethod
    def column(cls, values: Sequence[object]) -> ScaledMatrix:
        """A ``len(values) x 1`` matrix (biases are columns)."""
        return cls.from_rows([[v] for v in values], cols=1)

    @classmethod
    def row(cls, values: Sequence[object]) -> ScaledMatrix:
        return cls.from_rows([list(values)])

    # views ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.num), self.cols)

    def entry(self, i: int, j: int) -> Fraction:
        return Fraction(self.num[i][j], self.den)

    def to_fractions(self) -> list[list[Fraction]]:
        return [[Fraction(x, self.den) for x in row] for row in self.num]

    def column_values(self) -> list[Fraction]:
        """Entries of a one-column matrix as Fractions."""
        if self.cols != 1:
            raise SpecError(f"expected a column, found shape {self.shape}")
        return [Fraction(r[0], self.den) for r in self.num]

    def nonzeros(self) -> int:
        return sum(1 for row in self.num for x in row if x != 0)

    def max_bits(self) -> int:
        """Largest bit length of any reduced entry (numerator or denominator)."""
        best = 0
        for row in self.num:
            for x in row:
                if x:
                    g = math.gcd(x, self.den)
                    best = max(best, abs(x // g).bit_length(), (self.den // g).bit_length())
        return best

    def is_zero(self) -> bool:
        return all(x == 0 for row in self.num for x in row)

    # algebra ----------------------------------------------------------------------
    def reduced(self) -> ScaledMatrix:
        """Divide numerators and denominator by their common gcd."""
        g = self.den
        for row in self.num:
            for x in row:
                if g == 1:
                    break
                g = math.gcd(g, x)
        if g == 1:
            return self
        return ScaledMatrix(tuple(tuple(x // g for x in row) for row in self.num), self.den // g,
                            self.cols)

    def transpose(self) -> ScaledMatrix:
        rows = len(self.num)
        return ScaledMatrix(tuple(tuple(self.num[i][j] for i in range(rows))
                                  for j in range(self.cols)), self.den, rows)

    def matmul(self, other: ScaledMatrix) -> ScaledMatrix:
        if self.cols != len(other.num):
            raise SpecError(f"cannot multiply {self.shape} by {other.shape}")
        ot = other.transpose().num
        num = tuple(tuple(sum(a * b for a, b in zip(row, col, strict=True) if a) for col in ot)
                    for row in self.num)
        return ScaledMatrix(num, self.den * other.den, other.cols).reduced()
