"""A small bit-blaster: integers as two's-complement bit vectors in CNF (no solver import).

Every :class:`Int` carries its literals (least significant first) and an interval
``[lo, hi]`` that contains every value it can take; the interval is computed by exact
interval arithmetic, and the width is the smallest two's-complement width holding it.
Operations compute their result **modulo 2^W** for the result's width ``W`` (ripple-carry
adders, shift-and-add multiplication by the narrower operand's bits): as ``Z -> Z/2^W`` is
a ring homomorphism and the true result lies in ``[lo, hi]``, the ``W`` bits are exactly
its two's complement.  So there is never an overflow, and the sign bit is the sign.

Gates are Tseitin-encoded with constant folding (literal :attr:`Circuit.true` is fixed
true).  This module only builds clauses; :mod:`exactmem.search.solvers.sat_backend` solves
them; the trusted encoder :mod:`.search_encode` and the search's solver-side circuits use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def width(lo: int, hi: int) -> int:
    """Smallest two's-complement width holding every integer of ``[lo, hi]``."""
    return max((v if v >= 0 else -v - 1).bit_length() + 1 for v in (lo, hi))


@dataclass(frozen=True, slots=True)
class Int:
    bits: tuple[int, ...]  # literals, least significant first; the last is the sign
    lo: int
    hi: int

    def bit(self, i: int) -> int:
        """Bit ``i`` of the sign-extended vector."""
        return self.bits[i] if i < len(self.bits) else self.bits[-1]


class VariableLimit(Exception):
    """The circuit needs more variables than :attr:`Circuit.max_vars`."""


class Circuit:
    """Fresh variables, clauses, and gates over them.  ``max_vars`` (when set) bounds the
    work: a circuit that needs more variables raises :class:`VariableLimit`."""

    def __init__(self, max_vars: int | None = None) -> None:
        self.nvars = 1
        self.true = 1
        self.max_vars = max_vars
        self.clauses: list[list[int]] = [[1]]
        self._gates: dict[tuple[int, ...], int] = {}  # structural hashing

    def var(self) -> int:
        self.nvars += 1
        if self.max_vars is not None and self.nvars > self.max_vars:
            raise VariableLimit(f"more than {self.max_vars} variables")
        return self.nvars

    # gates -------------------------------------------------------------------------
    def and_(self, lits: Sequence[int]) -> int:
        t = self.true
        xs = []
        for x in lits:
            if x == -t:
                return -t
            if x != t and x not in xs:
                xs.append(x)
        if not xs:
            return t
        if len(xs) == 1:
            return xs[0]
        if any(-x in xs for x in xs):
            return -t
        key = (0, *sorted(xs))
        g = self._gates.get(key, 0)
        if g:
            return g
        g = self._gates[key] = self.var()
        self.clauses.extend([-g, x] for x in xs)
        self.clauses.append([g] + [-x for x in xs])
        return g

    def or_(self, lits: Sequence[int]) -> int:
        return -self.and_([-x for x in lits])

    def xor(self, a: int, b: int) -> int:
        t = self.true
        if abs(a) == t:
            return -b if a == t else b
        if abs(b) == t:
            return -a if b == t else a
        if a == b:
            return -t
        if a == -b:
            return t
        sign = 1 if (a > 0) == (b > 0) else -1  # xor(-a, b) = -xor(a, b)
        key = (1, *sorted((abs(a), abs(b))))
        g = self._gates.get(key, 0)
        if not g:
            g = self._gates[key] = self.var()
            a, b = key[1], key[2]
            self.clauses += [[-g, a, b], [-g, -a, -b], [g, -a, b], [g, a, -b]]
        return sign * g

    def maj(self, a: int, b: int, c: int) -> int:
        t = self.true
        for x, y, z in ((a, b, c), (b, a, c), (c, a, b)):
            if x == t:
                return self.or_([y, z])
            if x == -t:
                return self.and_([y, z])
        if a == b or a == c:
            return a
        if b == c:
            return b
        if a == -b:
            return c
        if a == -c:
            return b
        if b == -c:
            return a
        key = (2, *sorted((a, b, c)))
        g = self._gates.get(key, 0)
        if g:
            return g
        g = self._gates[key] = self.var()
        self.clauses += [[-g, a, b], [-g, a, c], [-g, b, c], [g, -a, -b], [g, -a, -c],
                         [g, -b, -c]]
        return g

    # integers ------------------------------------------------------------------------
    def const(self, k: int) -> Int:
        w = width(k, k)
        t = self.true
        return Int(tuple(t if (k >> i) & 1 else -t for i in range(w)), k, k)

    def fresh(self, bits: int) -> Int:
        """A free ``bits``-bit integer in ``[-2^(bits-1), 2^(bits-1))``."""
        return Int(tuple(self.var() for _ in range(bits)), -(1 << (bits - 1)),
                   (1 << (bits - 1)) - 1)

    def _ring_add(self, a: Sequence[int], b: Sequence[int], carry: int) -> list[int]:
        out = []
        for x, y in zip(a, b, strict=True):
            out.append(self.xor(self.xor(x, y), carry))
            carry = self.maj(x, y, carry)
        return out

    def _ext(self, x: Int, w: int) -> list[int]:
        return [x.bit(i) for i in range(w)]

    def add(self, x: Int, y: Int, negate_y: bool = False) -> Int:
        """``x + y`` (or ``x - y``)."""
        lo, hi = (x.lo - y.hi, x.hi - y.lo) if negate_y else (x.lo + y.lo, x.hi + y.hi)
        w = width(lo, hi)
        yb = self._ext(y, w)
        if negate_y:
            yb = [-b for b in yb]
        t = self.true
        return Int(tuple(self._ring_add(self._ext(x, w), yb, t if negate_y else -t)), lo, hi)

    def sum(self, xs: Sequence[Int]) -> Int:
        xs = [x for x in xs if not (x.lo == x.hi == 0)]
        if not xs:
            return self.const(0)
        while len(xs) > 1:
            xs = [self.add(xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i]
                  for i in range(0, len(xs), 2)]
        return xs[0]

    def cond(self, sel: int, x: Int) -> Int:
        """``x`` when literal ``sel`` is true, else 0."""
        return Int(tuple(self.and_([sel, b]) for b in x.bits), min(0, x.lo), max(0, x.hi))

    def shift(self, x: Int, k: int) -> Int:
        return Int((-self.true,) * k + x.bits, x.lo << k, x.hi << k)

    def mul(self, x: Int, y: Int) -> Int:
        """``x * y``: shift-and-add over the bits of the narrower operand."""
        if len(y.bits) > len(x.bits):
            x, y = y, x
        if y.lo == y.hi:
            return self.mul_const(x, y.lo)
        corners = [a * b for a in (x.lo, x.hi) for b in (y.lo, y.hi)]
        lo, hi = min(corners), max(corners)
        w = width(lo, hi)
        n = len(y.bits)
        acc = [-self.true] * w
        for i in range(n):
            part = self._ext(self.cond(y.bits[i], self.shift(x, i)), w) if i < w else None
            if part is None:
                break
            if i < n - 1:
                acc = self._ring_add(acc, part, -self.true)
            else:  # the sign bit weighs -2^(n-1)
                acc = self._ring_add(acc, [-b for b in part], self.true)
        return Int(tuple(acc), lo, hi)

    def mul_const(self, x: Int, k: int) -> Int:
        if k == 0:
            return self.const(0)
        if k < 0:
            return self.add(self.const(0), self.mul_const(x, -k), negate_y=True)
        parts = [self.shift(x, i) for i in range(k.bit_length()) if (k >> i) & 1]
        return self.sum(parts)

    def dot(self, ws: Sequence[Int], xs: Sequence[Int]) -> Int:
        return self.sum([self.mul(w, x) for w, x in zip(ws, xs, strict=True)])

    # predicates --------------------------------------------------------------------
    def negative(self, x: Int) -> int:
        """Literal: ``x < 0``."""
        if x.hi < 0:
            return self.true
        if x.lo >= 0:
            return -self.true
        return x.bits[-1]

    def is_zero(self, x: Int) -> int:
        if x.lo > 0 or x.hi < 0:
            return -self.true
        return self.and_([-b for b in x.bits])

    def less(self, x: Int, y: Int) -> int:
        """Literal: ``x < y``."""
        return self.negative(self.add(x, y, negate_y=True))

    def lex_leq(self, a: Sequence[int], b: Sequence[int]) -> None:
        """Clauses forcing the bit string ``a`` <= ``b`` (unsigned, first bit most
        significant): while the strings agree, ``a_i`` true forces ``b_i`` true."""
        same = self.true
        for x, y in zip(a, b, strict=True):
            self.clauses.append([-same, -x, y])
            same = self.and_([same, -self.xor(x, y)])

    def clause(self, lits: Sequence[int]) -> None:
        """Add a clause, folding the constants (a true literal satisfies it, a false one
        is dropped)."""
        if self.true in lits:
            return
        self.clauses.append([x for x in lits if x != -self.true])

    def exclude(self, xs: Sequence[Int], values: Sequence[int]) -> None:
        """Clause: the integers ``xs`` do not take the ``values`` (all at once)."""
        self.clauses.append([-b if (v >> i) & 1 else b
                             for x, v in zip(xs, values, strict=True)
                             for i, b in enumerate(x.bits)])

    def relu(self, x: Int) -> Int:
        neg = self.negative(x)
        return Int(tuple(self.and_([-neg, b]) for b in x.bits), max(0, x.lo), max(0, x.hi))

    def select(self, options: Sequence[tuple[int, Int]]) -> Int:
        """The ``Int`` whose selector is true; exactly one selector must be true."""
        lo, hi = min(x.lo for _, x in options), max(x.hi for _, x in options)
        w = width(lo, hi)
        bits = [self.or_([self.and_([s, x.bit(i)]) for s, x in options]) for i in range(w)]
        return Int(tuple(bits), lo, hi)

    def value(self, x: Int, model: set[int]) -> int:
        """The value of ``x`` under a model (the set of true literals)."""
        v = sum(1 << i for i, b in enumerate(x.bits) if (b in model))
        return v - (1 << len(x.bits)) if x.bits[-1] in model else v
