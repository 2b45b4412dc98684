"""A sum in which one row has many more pieces than the others (a row that gains a block
each map, as in Lemma C.1's chain) is added last, its pieces copied in slices
(``_plus_largest`` in the producer and the checker): its values at every point equal a
point-by-point sum written here, for random rows, weights and biases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker import net_piecewise as cpiece
from exactmem.model import piecewise as mpiece

SIZE = 60
coef = st.integers(-(1 << 70), 1 << 70) | st.sampled_from([0, 0, 1, -1])


@st.composite
def rows(draw: st.DrawFn, pieces: int, slopes: bool, least: int = 1,
         ) -> tuple[list[int], list[int] | None, list[int]]:
    """A row on ``least`` to ``pieces`` pieces of the points ``0 .. SIZE - 1`` (first
    start 0)."""
    inner = draw(st.lists(st.integers(1, SIZE - 1), min_size=least - 1, max_size=pieces - 1,
                          unique=True))
    starts = [0, *sorted(inner)]
    a = [draw(coef) for _ in starts] if slopes and draw(st.booleans()) else None
    return starts, a, [draw(coef) for _ in starts]


def at_points(row: tuple[list[int], list[int] | None, list[int]], xs: list[int]) -> list[int]:
    """The row's value at every point, one point at a time."""
    starts, a, b = row
    out = []
    for i, x in enumerate(xs):
        p = max(k for k, s in enumerate(starts) if s <= i)
        out.append((0 if a is None else a[p] * x) + b[p])
    return out


@st.composite
def sums(draw: st.DrawFn) -> tuple[list, list[int], int, list[int]]:
    slopes = draw(st.booleans())
    big = draw(rows(SIZE, slopes, least=40))
    small = draw(st.lists(rows(3, slopes), min_size=1, max_size=3))
    weights = [draw(st.integers(-(1 << 40), 1 << 40).filter(bool)) for _ in range(len(small) + 1)]
    xs = sorted(draw(st.lists(st.integers(-50, 50), min_size=SIZE, max_size=SIZE)))
    return [big, *small], weights, draw(coef), xs


@settings(max_examples=150, deadline=None)
@given(sums())
def test_checker_sum_with_a_largest_row(case: tuple[list, list[int], int, list[int]]) -> None:
    rs, weights, bias, xs = case
    order = list(range(len(rs)))[::-1]  # the largest row read last, or first
    for perm in (order, sorted(order)):
        terms = [rs[k] for k in perm]
        w = [weights[k] for k in perm]
        got = cpiece._affine_row(terms, w, 1, bias, SIZE, {})
        want = [sum(wk * v for wk, v in zip(w, col, strict=True)) + bias
                for col in zip(*(at_points(r, xs) for r in terms), strict=True)]
        assert at_points(got, xs) == want
        starts = got[0]
        assert starts[0] == 0 and all(p < q for p, q in zip(starts, starts[1:], strict=False))


def _producer_row(row: tuple[list[int], list[int] | None, list[int]]) -> mpiece.Rows:
    starts, a, b = row
    return mpiece.Rows(np.array(starts, dtype=np.int64),
                       None if a is None else mpiece._obj(a), mpiece._obj(b))


@settings(max_examples=150, deadline=None)
@given(sums())
def test_producer_sum_with_a_largest_row(case: tuple[list, list[int], int, list[int]]) -> None:
    rs, weights, bias, xs = case
    prs = [_producer_row(r) for r in rs]
    for perm in (list(range(len(rs))), list(range(len(rs)))[::-1]):
        got = mpiece._combine(prs, [(weights[k], k) for k in perm], bias, SIZE)
        row = (got.starts.tolist(), None if got.a is None else list(got.a), list(got.b))
        want = [sum(wk * v for wk, v in zip(weights, col, strict=True)) + bias
                for col in zip(*(at_points(r, xs) for r in rs), strict=True)]
        assert at_points(row, xs) == want


def test_the_largest_row_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A big row and a short one do reach ``plus_largest``, and give the pointwise sum."""
    calls: list[int] = []
    real = cpiece.plus_largest

    def spy(w: int, big: cpiece.Row, rest: cpiece.Row, size: int) -> cpiece.Row:
        calls.append(1)
        return real(w, big, rest, size)

    monkeypatch.setattr(cpiece, "plus_largest", spy)
    big = (list(range(0, SIZE, 2)), None, list(range(SIZE // 2)))
    small = ([0, 7], None, [0, 5])
    got = cpiece._affine_row([big, small], [1, 1], 1, 0, SIZE, {})
    assert calls
    assert at_points(got, list(range(SIZE))) == [i // 2 + (5 if i >= 7 else 0)
                                                 for i in range(SIZE)]
