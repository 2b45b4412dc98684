"""Lemma C.2's projection draws its first tries up front and tries them on numpy limbs, or in
Python integers with, for many points, half of them in a forked child: the projection and the
random stream after it are those of drawing and trying one at a time (written here), on
every path, also when some draws are invalid (two points meet)."""

from __future__ import annotations

import random
from fractions import Fraction
from operator import mul

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.constructions import _projection
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


@pytest.mark.parametrize("path", ["limbs", "python", "python-in-child"])
@settings(max_examples=40, deadline=None)
@given(points=points_st, seed=st.integers(0, 1 << 30), tries=st.integers(1, 9))
def test_projection_equals_trying_one_draw_at_a_time(
        path: str, points: list[tuple[Fraction, ...]], seed: int, tries: int) -> None:
    if path == "python-in-child" and not forked.usable():
        pytest.skip("no os.fork here")
    old = _projection.PARALLEL_POINTS, _projection.LIMBS
    _projection.PARALLEL_POINTS = 0 if path == "python-in-child" else 1 << 60
    _projection.LIMBS = path == "limbs"
    try:
        mine, ref = random.Random(seed), random.Random(seed)
        got = _projection.stage_one_projection(points, mine, tries=tries)
    finally:
        _projection.PARALLEL_POINTS, _projection.LIMBS = old
    w, b = one_at_a_time(points, ref, tries=tries)
    assert (got.weight, got.bias) == (w, b)
    assert mine.random() == ref.random()  # the same draws were made


def _summary(t: _projection.Try) -> object:
    return None if t is None else (t[0], t[2], t[3], t[4])


@settings(max_examples=200, deadline=None)
@given(d=st.integers(1, 4), bits=st.sampled_from([3, 20, 30, 47]), g_bits=st.sampled_from(
    [2, 24, 40, 48]), seed=st.integers(0, 1 << 30), count=st.integers(1, 40))
def test_a_limb_draw_is_the_integer_draw(d: int, bits: int, g_bits: int, seed: int,
                                         count: int) -> None:
    """Near the limbs' bounds, with negative coordinates, repeated values (no valid draw)
    and gaps of every size, a limb draw has the range, gap and least value of Python's."""
    rng = random.Random(seed)
    top = (1 << bits) - 1
    ints = [tuple(rng.choice([rng.randint(-top, top), top, -top, 0]) for _ in range(d))
            for _ in range(count)]
    K = (1 << g_bits) - 1  # noqa: N806
    limbs = _projection._limbs(ints, K)
    assert limbs is not None
    for _ in range(3):
        g = [rng.choice([rng.randint(-K, K), K, -K]) for _ in range(d)]
        assert _summary(_projection._try_limbs(g, limbs)) == \
            _summary(_projection._try(g, ints))


def test_limbs_refused_where_int64_could_overflow() -> None:
    assert _projection._limbs([(1 << 48,)], 10) is None
    assert _projection._limbs([(-(1 << 48),)], 10) is None
    assert _projection._limbs([(1 << 70,)], 10) is None
    assert _projection._limbs([(1,), (2,)], 1 << 62) is None
    assert _projection._limbs([((1 << 48) - 1,)], 1 << 50) is not None
