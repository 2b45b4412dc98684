"""Solver-independent formulas: polynomial atoms over real unknowns with Boolean structure.

The encoding (:mod:`exactmem.search.encode.encoding`) writes "a network of this shape memorizes
this dataset" in this small language; a backend (:mod:`exactmem.search.solvers.z3_backend`)
translates it to one solver.  Coefficients are exact :class:`~fractions.Fraction` values.

* :class:`Poly` -- a polynomial: a map from monomials (sorted tuples of real-variable
  indices) to rational coefficients;
* atoms ``p == 0`` and ``p >= 0`` (:class:`Atom`), Boolean variables (:class:`BoolVar`),
  :class:`Not`, :class:`And`, :class:`Or`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

Mono = tuple[int, ...]
Relation = Literal["==", ">="]


class Poly:
    """A polynomial with rational coefficients; treat as immutable."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Mono, Fraction] | None = None) -> None:
        self.terms: dict[Mono, Fraction] = {k: v for k, v in (terms or {}).items() if v}

    @staticmethod
    def const(c: int | Fraction) -> Poly:
        return Poly({(): Fraction(c)})

    @staticmethod
    def var(i: int) -> Poly:
        return Poly({(i,): Fraction(1)})

    def __add__(self, other: Poly | int | Fraction) -> Poly:
        o = other if isinstance(other, Poly) else Poly.const(other)
        out = dict(self.terms)
        for k, v in o.terms.items():
            out[k] = out.get(k, Fraction(0)) + v
        return Poly(out)

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly({k: -v for k, v in self.terms.items()})

    def __sub__(self, other: Poly | int | Fraction) -> Poly:
        o = other if isinstance(other, Poly) else Poly.const(other)
        return self + (-o)

    def __rsub__(self, other: int | Fraction) -> Poly:
        return Poly.const(other) - self

    def __mul__(self, other: Poly | int | Fraction) -> Poly:
        if not isinstance(other, Poly):
            c = Fraction(other)
            return Poly({k: v * c for k, v in self.terms.items()})
        out: dict[Mono, Fraction] = {}
        for k1, v1 in self.terms.items():
            for k2, v2 in other.terms.items():
                k = tuple(sorted(k1 + k2))
                out[k] = out.get(k, Fraction(0)) + v1 * v2
        return Poly(out)

    __rmul__ = __mul__

    def is_const(self) -> bool:
        return all(not k for k in self.terms)

    def constant(self) -> Fraction:
        return self.terms.get((), Fraction(0))

    def single_var(self) -> int | None:
        """The variable index when this polynomial is exactly one variable."""
        if len(self.terms) == 1:
            (k, v), = self.terms.items()
            if len(k) == 1 and v == 1:
                return k[0]
        return None

    def degree(self) -> int:
        return max((len(k) for k in self.terms), default=0)

    def evaluate(self, values: Sequence[Fraction]) -> Fraction:
        total = Fraction(0)
        for k, v in self.terms.items():
            term = v
            for i in k:
                term *= values[i]
            total += term
        return total

    def __repr__(self) -> str:
        return f"Poly({self.terms!r})"


def dot(a: Sequence[Poly], b: Sequence[Poly]) -> Poly:
    """``sum_i a_i b_i``."""
    out = Poly()
    for x, y in zip(a, b, strict=True):
        out = out + x * y
    return out


def matvec(m: Sequence[Sequence[Poly]], v: Sequence[Poly]) -> list[Poly]:
    return [dot(row, v) for row in m]


@dataclass(frozen=True, slots=True)
class Atom:
    """``poly == 0`` or ``poly >= 0``."""

    poly: Poly
    rel: Relation


@dataclass(frozen=True, slots=True)
class BoolVar:
    index: int


@dataclass(frozen=True, slots=True)
class Not:
    arg: Formula


@dataclass(frozen=True, slots=True)
class And:
    args: tuple[Formula, ...]


@dataclass(frozen=True, slots=True)
class Or:
    args: tuple[Formula, ...]


Formula = Atom | BoolVar | Not | And | Or


def eq(a: Poly, b: Poly | int | Fraction = 0) -> Atom:
    return Atom(a - b, "==")


def ge(a: Poly, b: Poly | int | Fraction = 0) -> Atom:
    return Atom(a - b, ">=")


def le(a: Poly, b: Poly | int | Fraction = 0) -> Atom:
    return Atom((b if isinstance(b, Poly) else Poly.const(b)) - a, ">=")


def conj(parts: Iterable[Formula]) -> Formula:
    t = tuple(parts)
    return t[0] if len(t) == 1 else And(t)


def disj(parts: Iterable[Formula]) -> Formula:
    t = tuple(parts)
    return t[0] if len(t) == 1 else Or(t)


@dataclass(slots=True)
class Problem:
    """Unknowns, constraints and the map from parameter names to matrices of unknowns.

    ``params[name]`` is a matrix (rows of polynomials, each a variable or a constant) the
    witness builder reads back; ``param_vars`` lists the variables that are weights (the
    others are auxiliary activations, determined by the weights once the case split is).
    """

    reals: list[str] = field(default_factory=list)
    bools: list[str] = field(default_factory=list)
    constraints: list[Formula] = field(default_factory=list)
    params: dict[str, list[list[Poly]]] = field(default_factory=dict)
    param_vars: list[int] = field(default_factory=list)

    def real(self, name: str, param: bool = False) -> Poly:
        self.reals.append(name)
        i = len(self.reals) - 1
        if param:
            self.param_vars.append(i)
        return Poly.var(i)

    def boolean(self, name: str) -> BoolVar:
        self.bools.append(name)
        return BoolVar(len(self.bools) - 1)

    def matrix(self, name: str, rows: int, cols: int) -> list[list[Poly]]:
        m = [[self.real(f"{name}[{i},{j}]", param=True) for j in range(cols)]
             for i in range(rows)]
        self.params[name] = m
        return m

    def add(self, f: Formula) -> None:
        self.constraints.append(f)

    def define(self, name: str, exprs: Sequence[Poly]) -> list[Poly]:
        """Auxiliary variables equal to ``exprs`` (kept as they are when already simple)."""
        out = []
        for k, e in enumerate(exprs):
            if e.is_const() or e.single_var() is not None:
                out.append(e)
            else:
                v = self.real(f"{name}[{k}]")
                self.add(eq(v, e))
                out.append(v)
        return out
