"""Rows of pieces for :mod:`.net_piecewise` (standard library): their form, their
compaction, and the sum of a row with many pieces and a row with few.

A row is ``(starts, a, b)``: ``starts[p]`` is the first point of piece ``p`` and the row is
``a[p] x + b[p]`` on it (numerators over the map's denominator; ``a`` is ``None`` when every
slope is 0).  :func:`plus_largest` adds a short row to a long one (a row that gains a block
each map, in Lemma C.1's Stage II) with a bisection per short piece and slice copies of the
long row's lists, instead of walking the common refinement of both.
"""

from bisect import bisect_left
from itertools import compress, repeat
from operator import add, lt, mul, ne, or_

Row = tuple[list[int], list[int] | None, list[int]]
"""A row: ``(starts, a, b)``, the first point of each piece, slopes (``None``: all 0) and
intercepts, numerators over the map's denominator."""


def compact(starts: list[int], a: list[int] | None, b: list[int], size: int) -> Row:
    """Drop empty pieces and join neighbours with equal coefficients."""
    ends = [*starts[1:], size]
    if not all(map(lt, starts, ends)):  # an empty piece
        live = list(map(lt, starts, ends))
        starts, b = list(compress(starts, live)), list(compress(b, live))
        a = None if a is None else list(compress(a, live))
    new = list(map(ne, b[1:], b)) if a is None else list(map(or_, map(ne, b[1:], b),
                                                             map(ne, a[1:], a)))
    if all(new):
        return starts, a, b
    new.insert(0, True)
    return (list(compress(starts, new)), None if a is None else list(compress(a, new)),
            list(compress(b, new)))


def scaled(values: list[int], w: int) -> list[int]:
    return values if w == 1 else list(map(mul, repeat(w), values))


def _onto(big: list[int], starts: list[int]) -> tuple[list[int], list[int], list[int]]:
    """The cuts of ``big`` and ``starts`` (both sorted, first 0; ``starts`` the short one),
    the positions in ``big`` before which the new cuts go, and each start's index among the
    cuts (one bisection per start; ``big`` is copied in slices, not walked)."""
    if big[0] != 0 or starts[0] != 0:
        raise ValueError("a row's first piece must start at point 0")
    at: list[int] = []
    index: list[int] = []
    new: list[int] = []
    for s in starts:
        p = bisect_left(big, s)
        index.append(p + len(new))  # the new cuts before ``s`` are all below it
        if p == len(big) or big[p] != s:
            at.append(p)
            new.append(s)
    cuts: list[int] = []
    prev = 0
    for p, s in zip(at, new):
        cuts += big[prev:p]
        cuts.append(s)
        prev = p
    cuts += big[prev:]
    return cuts, at, index


def _onto_big(values: list[int], at: list[int]) -> list[int]:
    """``big``'s per-piece values on the cuts of :func:`_onto`: a new cut at position ``p``
    lies in piece ``p - 1`` (every new cut is above ``big[0] = 0``)."""
    out: list[int] = []
    prev = 0
    for p in at:
        out += values[prev:p]
        out.append(values[p - 1])
        prev = p
    out += values[prev:]
    return out


def _plus_pieces(big: list[int], values: list[int], index: list[int]) -> list[int]:
    """``big`` (values on the cuts) plus the short row's per-piece ``values``: piece ``j``
    covers the cuts from ``index[j]`` to ``index[j + 1]``; where it is 0, ``big``'s values
    are copied, not added to."""
    out: list[int] = []
    for v, lo, hi in zip(values, index, [*index[1:], len(big)]):
        out += big[lo:hi] if v == 0 else map(add, big[lo:hi], repeat(v))
    return out


def plus_largest(w: int, big: Row, rest: Row, size: int) -> Row:
    """``w * big + rest`` where ``big`` has many more pieces than ``rest``: ``rest`` is
    refined onto ``big``'s pieces with a bisection per piece of ``rest`` and ``big``'s
    lists are copied in slices, so the work per piece of ``big`` is a list copy and, where
    ``rest`` is not 0, one addition (a row that gains a block a map stays cheap)."""
    (bs, ba, bb), (rs, ra, rb) = big, rest
    cuts, at, index = _onto(bs, rs)
    b = _plus_pieces(scaled(_onto_big(bb, at), w), rb, index)
    a: list[int] | None = None
    if ba is not None or (ra is not None and any(ra)):
        big_a = [0] * len(cuts) if ba is None else scaled(_onto_big(ba, at), w)
        a = big_a if ra is None else _plus_pieces(big_a, ra, index)
        a = a if any(a) else None
    return compact(cuts, a, b, size)
