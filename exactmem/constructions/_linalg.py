"""Exact linear algebra over Q for the attention constructions (python-flint ``fmpq_mat``).

Ranks, Kruskal-rank checks and solving ``A x = b`` exactly; results come back as
:class:`fractions.Fraction`.  No float anywhere.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import flint

from exactmem.errors import ConstructionError

Vector = Sequence[Fraction]


def to_fmpq_mat(rows: Sequence[Vector]) -> flint.fmpq_mat:
    """An exact flint matrix from rows of Fractions."""
    m = len(rows)
    n = len(rows[0]) if m else 0
    flat = [flint.fmpq(int(x.numerator), int(x.denominator)) for r in rows for x in r]
    return flint.fmpq_mat(m, n, flat)


def from_fmpq(x: flint.fmpq) -> Fraction:
    return Fraction(int(x.p), int(x.q))


def rank(rows: Sequence[Vector]) -> int:
    """Rank over Q of the matrix with the given rows."""
    if not rows or not rows[0]:
        return 0
    return int(to_fmpq_mat(rows).rank())


@dataclass(frozen=True, slots=True)
class KruskalReport:
    """Result of a Kruskal-rank check: ``exhaustive`` or ``sampled`` (``checked`` subsets of
    ``total``); ``witness`` = a dependent subset, if one was found."""

    method: str
    checked: int
    total: int
    witness: tuple[int, ...] | None

    def label(self) -> str:
        if self.method == "exhaustive":
            return f"exhaustive ({self.checked} subsets)"
        return f"sampled ({self.checked} random subsets of {self.total})"


def kruskal_at_least(vectors: Sequence[Vector], k: int, exhaustive_limit: int = 20000,
                     samples: int = 2000, seed: int = 0) -> KruskalReport:
    """Check that every ``k`` of ``vectors`` are linearly independent (Kruskal rank >= k).

    Exhaustive when there are at most ``exhaustive_limit`` subsets, otherwise ``samples``
    random subsets (the report says ``sampled``: a pass is then evidence, not proof).
    """
    n = len(vectors)
    if k <= 0:
        return KruskalReport("exhaustive", 0, 0, None)
    if k > n:
        k = n
    total = math.comb(n, k)
    if total <= exhaustive_limit:
        subsets: Sequence[tuple[int, ...]] | list[tuple[int, ...]] = list(
            itertools.combinations(range(n), k))
        method = "exhaustive"
    else:
        rng = random.Random(seed)
        subsets = [tuple(sorted(rng.sample(range(n), k))) for _ in range(samples)]
        method = "sampled"
    for count, sub in enumerate(subsets, 1):
        if rank([vectors[i] for i in sub]) < k:
            return KruskalReport(method, count, total, sub)
    return KruskalReport(method, len(subsets), total, None)


def solve_rows(a: Sequence[Vector], b: Sequence[Vector]) -> list[list[Fraction]]:
    """One exact solution ``X`` of ``A X = B`` (``A`` is T x D with rank T <= D).

    Free variables are set to zero: the pivot columns of ``A`` form an invertible T x T
    system.  Raises :class:`ConstructionError` when ``rank(A) < T``.
    """
    t = len(a)
    mat = to_fmpq_mat(a)
    r = int(mat.rank())
    if r < t:
        raise ConstructionError(f"the feature matrix has rank {r} < {t} rows")
    pivots: list[int] = list(range(t))
    if t != mat.ncols():
        rref, _ = mat.rref()
        pivots = []
        for i in range(t):
            for j in range(mat.ncols()):
                if rref[i, j] != 0:
                    pivots.append(j)
                    break
    square = to_fmpq_mat([[row[j] for j in pivots] for row in a])
    sol = square.solve(to_fmpq_mat(b))
    out = [[Fraction(0)] * len(b[0]) for _ in range(mat.ncols())]
    for i, j in enumerate(pivots):
        for c in range(len(b[0])):
            out[j][c] = from_fmpq(sol[i, c])
    return out


def solve_min_norm(a: Sequence[Vector], b: Sequence[Vector]) -> list[list[Fraction]]:
    """The minimum-norm solution ``X = A^T (A A^T)^{-1} B`` of ``A X = B`` (exact).

    Unlike a pivot solution it does not depend on which columns look independent, so it
    stays small when ``A`` is a rational stand-in for a matrix known only to high precision.
    Raises :class:`ConstructionError` when ``rank(A) < T``.
    """
    mat = to_fmpq_mat(a)
    r = int(mat.rank())
    if r < len(a):
        raise ConstructionError(f"the feature matrix has rank {r} < {len(a)} rows")
    gram = mat * mat.transpose()
    y = gram.solve(to_fmpq_mat(b))
    x = mat.transpose() * y
    return [[from_fmpq(x[i, j]) for j in range(x.ncols())] for i in range(x.nrows())]


def inverse(a: Sequence[Vector]) -> list[list[Fraction]]:
    """Exact inverse of a square matrix; :class:`ConstructionError` if singular."""
    mat = to_fmpq_mat(a)
    if int(mat.rank()) < len(a):
        raise ConstructionError("matrix is singular")
    inv = mat.inv()
    return [[from_fmpq(inv[i, j]) for j in range(len(a))] for i in range(len(a))]


def matmul(a: Sequence[Vector], b: Sequence[Vector]) -> list[list[Fraction]]:
    """Exact product ``A B`` (flint), as rows of Fractions."""
    x = to_fmpq_mat(a) * to_fmpq_mat(b)
    return [[from_fmpq(x[i, j]) for j in range(x.ncols())] for i in range(x.nrows())]


def round_dyadic(x: Fraction, bits: int) -> Fraction:
    """Nearest multiple of ``2^-bits`` (ties toward +infinity)."""
    return Fraction(math.floor(x * (1 << bits) + Fraction(1, 2)), 1 << bits)
