"""Point-indicator banks: a one-hidden-layer ReLU network that is a lookup table on a grid.

For a point ``p`` the tent ``T_p(x) = relu(x - p + 1) - 2 relu(x - p) + relu(x - p - 1)``
is 1 at ``x = p`` and 0 wherever ``|x - p| >= 1``.  Given points at pairwise distance
``>= 1`` and a value vector per point, ``sum_p v_p T_p(x)`` returns ``v_p`` at every point
``p``.  This is the interval indicator of Lemma G.2 (Kajitsuka & Sato) specialised to
unit-spaced points, in one hidden layer so that it can be evaluated by a breakpoint sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from exactmem.arith import ScaledMatrix
from exactmem.errors import ConstructionError
from exactmem.model.spec import Affine, FeedForward


def point_indicator_bank(points: Sequence[Fraction], values: Sequence[Sequence[int | Fraction]],
                         ) -> FeedForward:
    """A block ``R -> R^k`` with ``f(points[j]) = values[j]`` exactly.

    Points must be pairwise at distance >= 1 (checked exactly).
    """
    if not points:
        raise ConstructionError("an indicator bank needs at least one point")
    if len(points) != len(values):
        raise ConstructionError(f"{len(points)} points but {len(values)} value vectors")
    k = len(values[0])
    order = sorted(range(len(points)), key=lambda j: points[j])
    for a, b in zip(order, order[1:], strict=False):
        if points[b] - points[a] < 1:
            raise ConstructionError(f"points {points[a]} and {points[b]} are closer than 1")
    pts = [Fraction(points[j]) for j in order]
    vals = [[Fraction(v) for v in values[j]] for j in order]
    pden = math.lcm(*(p.denominator for p in pts))
    vden = math.lcm(*(v.denominator for row in vals for v in row))
    weights = ((pden,),) * (3 * len(pts))
    biases = tuple((shift * pden - p.numerator * (pden // p.denominator),)
                   for p in pts for shift in (1, 0, -1))
    out_rows = tuple(tuple(coef * v.numerator * (vden // v.denominator)
                           for row in vals for coef in (1, -2, 1) for v in (row[r],))
                     for r in range(k))
    first = Affine(ScaledMatrix(weights, pden, 1).reduced(),
                   ScaledMatrix(biases, pden, 1).reduced())
    second = Affine(ScaledMatrix(out_rows, vden, 3 * len(pts)).reduced(), None)
    return FeedForward((first, second), residual=False)
