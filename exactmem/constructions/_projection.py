"""Lemma C.2 of Kajitsuka & Sato (ICLR 2025), Stage-I projection, by the exact recipe.

A random integer direction ``g``; the least gap ``D`` of ``g . v`` over the points, computed
exactly; ``w = (2/D) g`` and ``b = 2 - min w . v``, so distinct points land ``>= 2`` apart
and ``>= 2``.  Of the first valid draws the one with the smallest range is kept (fewer bits
per field in Lemma C.1).

A draw is tried on the points' coordinates scaled to integers.  Where every coordinate has
fewer than 48 bits and the draw's products stay far inside int64, it is tried with numpy on
24-bit limbs (:func:`_try_limbs`: integer products and sums, carried into one exact
``high 2^48 + low`` pair per point, sorted as pairs); otherwise with Python integers, the
first draws half in a forked child.  The kept draw, the values and the random stream are
the same either way (``tests/constructions/test_projection_tries.py``).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import mul

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.constructions._gadget_c1 import Grid
from exactmem.errors import ConstructionError
from exactmem.model import forked
from exactmem.model.spec import Affine


@dataclass(frozen=True, slots=True)
class Projection:
    """``p(v) = w . v + b`` with values ``nums[i] / den``: distinct points >= 2 apart, every
    value >= 2 (checked exactly in ``__post_init__``)."""

    weight: tuple[Fraction, ...]
    bias: Fraction
    nums: tuple[int, ...]
    den: int

    def __post_init__(self) -> None:
        vs = sorted(self.nums)
        if vs and vs[0] < 2 * self.den:
            raise ConstructionError(f"projection: smallest value {vs[0]}/{self.den} is below 2")
        for a, b in zip(vs, vs[1:], strict=False):
            if b - a < 2 * self.den:
                raise ConstructionError(f"projection: values {a}/{self.den} and {b}/{self.den} "
                                        f"are closer than 2")

    @property
    def values(self) -> tuple[Fraction, ...]:
        return tuple(Fraction(v, self.den) for v in self.nums)

    @property
    def grid(self) -> Grid:
        """The values as integers over ``den`` (for Lemma C.1, without a ``Fraction`` each)."""
        return Grid(self.nums, self.den)

    def affine(self) -> Affine:
        return Affine(ScaledMatrix.row(list(self.weight)), ScaledMatrix.column([self.bias]))

    @property
    def top(self) -> Fraction:
        return Fraction(max(self.nums), self.den)


Try = tuple[Fraction, list[int], int, int, list[int]] | None
"""A draw ``g`` of Lemma C.2: its range in units of the least gap, the values ``g . Lv``,
the least gap, the least value and ``g``; ``None`` when two points meet."""

PARALLEL_POINTS = 1 << 16  # points from which the Python draws are tried on two cores
LIMBS = True  # try draws on numpy limbs where they are exact (False: Python integers only)
LIMB = 24  # bits of a limb
MASK = (1 << LIMB) - 1
INT64_ROOM = 1 << 62  # every product and partial sum of a limb draw stays below this
Limbs = tuple[np.ndarray, np.ndarray]
"""The points' integer coordinates ``u`` as ``u = high 2^24 + low``, ``0 <= low < 2^24``."""


def _try(g: list[int], ints: Sequence[tuple[int, ...]]) -> Try:
    vals = [sum(map(mul, g, v)) for v in ints]  # every point has d coordinates
    srt = sorted(vals)
    gap = min((b - a for a, b in zip(srt, srt[1:], strict=False)), default=1)
    if gap <= 0:
        return None
    return Fraction(srt[-1] - srt[0], gap), vals, gap, srt[0], g


def _limbs(ints: Sequence[tuple[int, ...]], K: int) -> Limbs | None:  # noqa: N803
    """The points' coordinates on 24-bit limbs, or ``None`` where a draw from ``{-K..K}`` on
    them could leave int64: every ``|u| < 2^48`` and ``d (K + 2^48) < 2^62`` make each limb
    product below ``K`` or ``2^48`` and each sum of ``d`` of them below ``2^62``."""
    d = len(ints[0])
    if not LIMBS or d * (K + (1 << 2 * LIMB)) >= INT64_ROOM:
        return None
    try:
        u = np.array(ints, dtype=np.int64).reshape(len(ints), d)
    except OverflowError:
        return None
    if bool(((u >= 1 << 2 * LIMB) | (u <= -(1 << 2 * LIMB))).any()):
        return None
    return u >> LIMB, u & MASK


def _try_limbs(g: list[int], limbs: Limbs) -> Try:
    """:func:`_try` without the values: ``g . u`` for every point as the exact pair
    ``high 2^48 + low`` (``0 <= low < 2^48``), sorted as pairs; the least gap is among the
    neighbours whose highs differ by at most one more than the least such difference."""
    high_u, low_u = limbs
    gv = np.array(g, dtype=np.int64)
    high_g, low_g = gv >> LIMB, gv & MASK
    p2 = high_u @ high_g  # weight 2^48
    p1 = low_u @ high_g + high_u @ low_g  # weight 2^24
    p0 = low_u @ low_g  # weight 1, >= 0
    p1 += p0 >> LIMB
    high = p2 + (p1 >> LIMB)
    low = ((p1 & MASK) << LIMB) | (p0 & MASK)
    order = _ascending(high, low)
    high, low = high[order], low[order]
    least = (int(high[0]) << 2 * LIMB) + int(low[0])
    spread = (int(high[-1]) << 2 * LIMB) + int(low[-1]) - least
    if len(high) < 2:
        return Fraction(spread, 1), [], 1, least, g
    dh, dl = np.diff(high), np.diff(low)
    near = dh <= int(dh.min()) + 1  # a gap is within 2^48 of dh 2^48
    gap = _least_gap(dh[near], dl[near])
    if gap <= 0:
        return None
    return Fraction(spread, gap), [], gap, least, g


def _ascending(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The order of the pairs ``high 2^48 + low``: by one int64 key ``floor(value / 2^(48-s))``
    (monotone; the widest ``s`` that fits), or, where two keys tie, by the pairs."""
    top = max(int(high.max()), -int(high.min()))
    s = min(2 * LIMB, 62 - top.bit_length())
    if s >= 0:
        key = (high << s) + (low >> (2 * LIMB - s))
        order = np.argsort(key)
        ranked = key[order]
        if not bool((ranked[1:] == ranked[:-1]).any()):
            return order
    return np.lexsort((low, high))


def _least_gap(dh: np.ndarray, dl: np.ndarray) -> int:
    """The least ``dh 2^48 + dl`` (exact; ``|dl| < 2^48``)."""
    if int(dh.max()) < 1 << 13:  # every term below 2^62
        return int(((dh << 2 * LIMB) + dl).min())
    return min((a << 2 * LIMB) + b for a, b in zip(dh.tolist(), dl.tolist(), strict=True))


def _least(tried: Sequence[Try]) -> int:
    """The index of the first valid draw with the least range (-1: none is valid)."""
    best = -1
    for i, t in enumerate(tried):
        if t is not None and (best < 0 or t[0] < tried[best][0]):  # type: ignore[index]
            best = i
    return best


def _tries_here(gs: list[list[int]], ints: Sequence[tuple[int, ...]]) -> list[Try]:
    """The draws ``gs``; only the first with the least range keeps its values (one list of
    values alive at a time besides the current draw's)."""
    out: list[Try] = []
    for g in gs:
        out.append(_try(g, ints))
        best = _least(out)
        out = [t if i == best else _no_values(t) for i, t in enumerate(out)]
    return out


def _no_values(t: Try) -> Try:
    return None if t is None else (t[0], [], t[2], t[3], t[4])


def _tries(gs: list[list[int]], ints: Sequence[tuple[int, ...]]) -> list[Try]:
    """:func:`_try` of every draw, in order; with many points and draws, the second half in
    a forked child (the points are shared, not sent; the child only computes and writes its
    pipe, so it may fork beside a progress thread).  Only the values of the draw with the
    least range of each half are kept (the others are never used)."""
    if len(gs) < 2 or len(ints) < PARALLEL_POINTS or (os.cpu_count() or 1) < 2 \
            or not forked.usable():
        return _tries_here(gs, ints)
    half = len(gs) // 2
    child = forked.Forked(_tries_here, gs[half:], ints)
    try:
        here = _tries_here(gs[:half], ints)
        return here + child.result()
    finally:
        child.close()


def stage_one_projection(points: Sequence[tuple[Fraction, ...]], rng: random.Random,
                         tries: int = 8, max_tries: int = 200) -> Projection:
    """Lemma C.2 by the exact recipe: draw ``g`` in ``{-K..K}^d``, ``D`` = least gap of ``g . v``
    (exact), ``w = (2/D) g``, ``b = 2 - min w . v``.  Of ``tries`` valid draws the one with the
    smallest range is kept (fewer bits per field in Lemma C.1).  ``points`` must be distinct.
    """
    if not points:
        raise ConstructionError("projection of an empty point set")
    d = len(points[0])
    L = 1  # common denominator: g . v = (g . (L v)) / L with integer L v
    for den in {x.denominator for v in points for x in v}:
        L = L * den // math.gcd(L, den)
    scale = {den: L // den for den in {x.denominator for v in points for x in v}}
    ints = [tuple([x.numerator * scale[x.denominator] for x in v]) for v in points]
    if len(set(ints)) != len(ints):  # v -> L v is one-to-one
        raise ConstructionError("projection: the points must be distinct")
    K = max(4, len(points) ** 2)
    # the first ``tries`` draws are always made (as many draws as valid ones at least): drawn
    # up front, in the same order, and tried on two cores when there are many points
    limbs = _limbs(ints, K)

    def attempt(gs: list[list[int]]) -> list[Try]:
        return _tries(gs, ints) if limbs is None else [_try_limbs(g, limbs) for g in gs]

    first = [[rng.randint(-K, K) for _ in range(d)] for _ in range(min(tries, max_tries))]
    tried = attempt(first)
    for _ in range(max_tries - len(first)):
        if sum(t is not None for t in tried) >= tries:
            break
        tried += attempt([[rng.randint(-K, K) for _ in range(d)]])
        keep = _least(tried)
        tried = [t if i == keep else _no_values(t) for i, t in enumerate(tried)]
    best = tried[_least(tried)] if _least(tried) >= 0 else None
    if best is None:
        raise ConstructionError(f"no separating projection found in {max_tries} draws")
    _, vals, gap, lo, g = best
    if limbs is not None:  # the kept draw's values, in Python integers
        vals = [sum(map(mul, g, v)) for v in ints]
        if min(vals) != lo:
            raise ConstructionError("projection: the limb and integer values disagree")
    # p(v) = 2 (g . Lv - lo) / gap + 2 = (2 (g . Lv) + 2 gap - 2 lo) / gap
    w = tuple(Fraction(2 * gi * L, gap) for gi in g)
    return Projection(w, Fraction(2 * gap - 2 * lo, gap),
                      tuple(2 * v + 2 * gap - 2 * lo for v in vals), gap)
