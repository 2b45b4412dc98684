"""Lemma C.1 networks for many points: one network, or Theorem F.1's chain of small ones.

Theorem F.1 of Kajitsuka & Sato (limited bit complexity, after Vardi et al. Thm 6.2): the
sorted points are cut into groups of ``B^2`` consecutive points; each group gets its own
Lemma C.1 network (0 on every other point, since all points are >= 2 apart) and the outputs
are summed.  Here the sub-networks run one after the other on the carried ``x`` with a
running total, so the width stays constant and the weights have ``~B`` bits instead of
``~sqrt(N)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from exactmem.constructions import _gadget_c1 as c1
from exactmem.constructions._gadgets import Expr, Program
from exactmem.errors import ConstructionError


def emit_chain(prog: Program, xs: Sequence[Fraction] | c1.Grid, labels: Sequence[int],
               zeros: Sequence[Fraction] = (), block_size: int = 0, group_points: int = 0,
               carry: Sequence[str] = ()) -> tuple[list[dict[str, Any]], Expr]:
    """Append Lemma C.1 on channel ``x`` for all points (groups of ``group_points`` if > 0).

    Returns per-network layout facts and the output expression (linear in the last channels).
    """
    keys, den = c1.on_grid(xs, zeros)  # integer keys x * den: the points', then the zeros'
    points = len(xs.keys) if isinstance(xs, c1.Grid) else len(xs)
    if len(labels) != points:
        raise ConstructionError(f"{points} points but {len(labels)} labels")
    order = sorted(range(points), key=keys.__getitem__)
    size = group_points if group_points > 0 else points
    groups = [order[s:s + size] for s in range(0, len(order), size)]
    zero_keys = keys[points:]
    facts: list[dict[str, Any]] = []
    pending: Expr | None = None
    for g in groups:
        gx = c1.Grid([keys[i] for i in g], den)
        gy = [labels[i] for i in g]
        others = c1.Grid([*zero_keys, *(keys[i] for h in groups if h is not g for i in h)]
                         if len(groups) > 1 else zero_keys, den)
        lay, pending = c1.emit(prog, gx, gy, others, block_size=block_size or None,
                               carry=carry, pending=pending, acc="total")
        facts.append({"points": len(g), "blocks": lay.m, "block_size": lay.k,
                      "rho": lay.rho, "c": lay.c})
    assert pending is not None
    return facts, pending
