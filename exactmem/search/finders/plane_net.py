"""One block in the plane, shared by both plane walks: a *front* (embedding and heads), a
*tail* (the feed-forward unit and the readout difference), the tail values one readout
difference reaches, and the exact network a front and a tail make
(:mod:`~exactmem.search.finders.plane_pool`, :mod:`~exactmem.search.finders.plane_exhaustive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from exactmem.checker.proofs.search_reps import grid_values
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.question.shape import Shape


@dataclass(frozen=True, slots=True)
class Front:
    embed: np.ndarray  # (m, V)
    heads: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]  # Q, K, V, O


@dataclass(frozen=True, slots=True)
class Tail:
    unit: tuple[tuple[int, ...], int, tuple[int, ...]] | None  # (W1, b1, W2), width 1
    b2: tuple[int, ...]
    r: tuple[int, ...]  # readout difference w_1 - w_0
    beta: int  # readout bias difference b_1 - b_0


def tail_values(r: tuple[int, ...], vecs: list[tuple[int, ...]], diffs: list[int], unit: bool
                ) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[tuple[int, ...], int]]]:
    """For a readout difference ``r``: the nonzero values of ``c = r W2`` (a ``W2`` of
    ``vecs`` each; none without a ``unit``) and the values of ``d = r b2 + beta`` (a
    ``(b2, beta)`` each, ``beta`` in ``diffs``; ``b2 = 0`` without a unit, whose layer it
    belongs to)."""
    cs: dict[int, tuple[int, ...]] = {}
    dvs: dict[int, tuple[tuple[int, ...], int]] = {}
    for w2 in vecs if unit else []:
        c = sum(a * b for a, b in zip(r, w2, strict=True))
        if c:
            cs.setdefault(c, w2)
    for b2 in vecs if unit else [(0,) * len(r)]:
        for beta in diffs:
            dvs.setdefault(sum(a * b for a, b in zip(r, b2, strict=True)) + beta, (b2, beta))
    return cs, dvs


def plane_network(shape: Shape, bits: int, ds: Dataset, front: Front, tail: Tail | None,
                  perm: tuple[int, ...] | None = None, flip: bool = False) -> NetworkSpec:
    """The exact network of a front and a tail (``None``: no unit, readout ``x_0 > 0``),
    token ``t`` of the front renamed ``perm[t]``, the readout rows swapped with ``flip``."""
    from exactmem.arith import ScaledMatrix
    from exactmem.search.question.shape import spec_of

    assert ds.vocab_size is not None
    m, vocab, g = shape.d_model, ds.vocab_size, grid_values(bits)

    def split(diff: int) -> tuple[int, int]:
        """Grid values ``(a, b)`` with ``b - a = diff``."""
        for a in g:
            if a + diff in g:
                return a, a + diff
        raise ValueError(f"{diff} is not a difference of two {bits}-bit integers")

    tail = tail or Tail(None, (0,) * m, (1,) + (0,) * (m - 1), 0)
    perm = perm or tuple(range(vocab))
    embed = np.zeros_like(front.embed)
    for t in range(vocab):
        embed[:, perm[t]] = front.embed[:, t]
    vals: dict[str, list[list[int]]] = {"embed": embed.tolist()}
    for h, (q, k, v, o) in enumerate(front.heads):
        p = f"att0.{h}."
        vals |= {p + "Q": [q.tolist()], p + "K": [k.tolist()], p + "V": [v.tolist()],
                 p + "O": [[int(a)] for a in o]}
    if shape.ff_width:
        w1, b1, w2 = tail.unit or ((0,) * m, 0, (0,) * m)
        vals |= {"ff0.W1": [list(w1)], "ff0.b1": [[b1]], "ff0.W2": [[a] for a in w2],
                 "ff0.b2": [[a] for a in tail.b2]}
    r, beta = tail.r, tail.beta
    if flip:  # the class-score difference negated: the complement labelling
        r, beta = tuple(-a for a in r), -beta
    rows = [split(a) for a in r]
    c0, c1 = split(beta)
    vals |= {"out.W": [[a for a, _ in rows], [b for _, b in rows]],
             "out.b": [[c0], [c1]]}
    mats = {name: ScaledMatrix.from_rows([[Fraction(int(v)) for v in row] for row in rows_],
                                         cols=len(rows_[0]))
            for name, rows_ in vals.items()}
    return spec_of(shape, ds.inputs, vocab, ds.n, 2, mats)
