"""Rigorous upper bounds of operator 2-norms for the execution radii of :mod:`lm_execution`
(standard library only).

``||W||_2**2`` is the largest eigenvalue of the Gram matrix ``G`` (``W W^T`` or ``W^T W``,
the smaller), at most the spectral radius of ``|G|`` (entry-wise absolute values: a matrix's
spectral radius is at most that of its absolute value), and for the non-negative ``|G|`` and
any positive vector ``x``, ``rho(|G|) <= max_i (|G| x)_i / x_i`` (Collatz-Wielandt).  ``x``
comes from a few power iterations on 40-bit integers (a guess: any positive ``x`` gives a
bound); everything is exact integer arithmetic.
"""

from math import isqrt
from operator import mul


def sqrt_up(n: int) -> int:
    """``ceil(sqrt(n))`` for an integer ``n >= 0``."""
    r = isqrt(n)
    return r if r * r == n else r + 1


def spectral_up(cols: list[list[int]]) -> int:
    """An integer ``>= ||W||_2`` for the integer matrix given by its columns ``cols``
    (``W[i][j] = cols[j][i]``; the scale is the caller's)."""
    rows = [list(r) for r in zip(*cols)]
    vecs = rows if len(rows) <= len(cols) else cols  # G = W W^T or W^T W, the smaller
    m = len(vecs)
    g = [[0] * m for _ in range(m)]
    for a in range(m):
        va = vecs[a]
        for b in range(a, m):
            g[a][b] = g[b][a] = abs(sum(map(mul, va, vecs[b])))
    if max(max(row) for row in g) == 0:
        return 0
    xi = [1 << 40] * m
    for _ in range(40):
        y = [sum(map(mul, row, xi)) for row in g]
        shift = max(max(y).bit_length() - 40, 0)
        xi = [(v >> shift) + 1 for v in y]
    lam = max(-(-sum(map(mul, row, xi)) // xv) for row, xv in zip(g, xi))
    return sqrt_up(lam)


def row_norms_up(cols: list[list[int]]) -> int:
    """``max_j ||column j||_2`` rounded up (integers)."""
    return max(sqrt_up(sum(x * x for x in c)) for c in cols)
