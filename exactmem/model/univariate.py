"""Exact evaluation of a one-hidden-layer ReLU network on scalar inputs by a breakpoint sweep.

``x -> C relu(a x + b) + d`` with ``a, b`` of length H is piecewise linear with breakpoints
``-b_j / a_j``.  Sorting the breakpoints once and keeping prefix sums of ``C_j a_j`` and
``C_j b_j`` evaluates Q inputs in ``O((H + Q) log H)`` exact integer operations instead of
``O(H Q)``.  The result is identical to the dense evaluation (same rationals); it is only a
different order of summation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from fractions import Fraction
from itertools import accumulate

from exactmem.model.spec import Affine


def sweep_eval(first: Affine, second: Affine, xs: Sequence[int],
               x_den: int) -> tuple[list[list[int]], int]:
    """Evaluate ``second(relu(first(x)))`` at ``x = xs[q] / x_den`` exactly.

    Returns ``(rows, den)``: ``rows[r][q] / den`` is output ``r`` at input ``q``.
    """
    A = [row[0] for row in first.weight.num]
    Da = first.weight.den
    if first.bias is None:
        B, Db = [0] * len(A), 1
    else:
        B, Db = [row[0] for row in first.bias.num], first.bias.den
    C, Dc = second.weight.num, second.weight.den
    k = len(C)
    if second.bias is None:
        d, Dd = [0] * k, 1
    else:
        d, Dd = [row[0] for row in second.bias.num], second.bias.den

    pos = sorted((Fraction(-B[j] * Da, A[j] * Db), j) for j in range(len(A)) if A[j] > 0)
    neg = sorted((Fraction(-B[j] * Da, A[j] * Db), j) for j in range(len(A)) if A[j] < 0)
    const0 = [sum(C[r][j] * B[j] for j in range(len(A)) if A[j] == 0 and B[j] > 0)
              for r in range(k)]
    t_pos = [t for t, _ in pos]
    t_neg = [t for t, _ in neg]
    # prefix sums over pos (active when t < x), suffix sums over neg (active when t > x)
    pre1 = [[0, *accumulate(C[r][j] * A[j] for _, j in pos)] for r in range(k)]
    pre0 = [[0, *accumulate(C[r][j] * B[j] for _, j in pos)] for r in range(k)]
    suf1 = [[0, *accumulate(C[r][j] * A[j] for _, j in reversed(neg))] for r in range(k)]
    suf0 = [[0, *accumulate(C[r][j] * B[j] for _, j in reversed(neg))] for r in range(k)]

    den = Dc * Da * Db * x_den * Dd
    rows: list[list[int]] = [[] for _ in range(k)]
    for X in xs:
        x = Fraction(X, x_den)
        ip = bisect_left(t_pos, x)
        ineg = len(t_neg) - bisect_right(t_neg, x)
        for r in range(k):
            s1 = pre1[r][ip] + suf1[r][ineg]
            s0 = pre0[r][ip] + suf0[r][ineg] + const0[r]
            rows[r].append(s1 * X * Db * Dd + s0 * Da * x_den * Dd + d[r] * Dc * Da * Db * x_den)
    return rows, den
