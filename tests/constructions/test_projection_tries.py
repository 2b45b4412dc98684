"""Lemma C.2's projection draws its first tries up front and, with many points, tries half
of them in a forked child: the projection and the random stream after it are those of
drawing and trying one at a time (written here), with and without the child, also when
some draws are invalid (two points meet)."""

from __future__ import annotations

import random
from fractions import Fraction
from operator import mul

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.constructions import _gadgets
from exactmem.model import forked


def one_at_a_time(points: list[tuple[Fraction, ...]], rng: random.Random, tries: int = 8,
                  max_tries: int = 200) -> tuple[tuple[Fraction, ...], Fraction]:
    """Draw ``g``, try it, stop after ``tries`` valid draws; keep the first with the least
    range ``(max - min) / least gap``.  Returns ``w`` and ``b`` of Lemma C.2."""
    d = len(points[0])
    K = max(4, len(points) ** 2)  # noqa: N806
    best = None
    valid = 0
    for _ in range(max_tries):
        g = [rng.randint(-K, K) for _ in range(d)]
        vals = sorted(sum(map(mul, g, v)) for v in points)
        gap = min((b - a for a, b in zip(vals, vals[1:], strict=False)), default=1)
        if gap <= 0:
            continue
        valid += 1
        spread = (vals[-1] - vals[0]) / gap
        if best is None or spread < best[0]:
            best = (spread, g, gap, vals[0])
        if valid >= tries:
            break
    assert best is not None
    _, g, gap, lo = best
    return tuple(Fraction(2 * gi) / gap for gi in g), 2 - Fraction(2 * lo) / gap


points_st = st.integers(1, 3).flatmap(lambda d: st.lists(
    st.tuples(*[st.fractions(-3, 3, max_denominator=4)] * d), min_size=2, max_size=12,
    unique=True))


@pytest.mark.parametrize("in_child", [False, True])
@settings(max_examples=40, deadline=None)
@given(points=points_st, seed=st.integers(0, 1 << 30), tries=st.integers(1, 9))
def test_projection_equals_trying_one_draw_at_a_time(
        in_child: bool, points: list[tuple[Fraction, ...]], seed: int, tries: int) -> None:
    if in_child and not forked.usable():
        pytest.skip("no os.fork here")
    old = _gadgets.PARALLEL_POINTS
    _gadgets.PARALLEL_POINTS = 0 if in_child else 1 << 60
    try:
        mine, ref = random.Random(seed), random.Random(seed)
        got = _gadgets.stage_one_projection(points, mine, tries=tries)
    finally:
        _gadgets.PARALLEL_POINTS = old
    w, b = one_at_a_time(points, ref, tries=tries)
    assert (got.weight, got.bias) == (w, b)
    assert mine.random() == ref.random()  # the same draws were made
