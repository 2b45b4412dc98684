"""Property tests of the exact ReLU gadgets (Kajitsuka & Sato App. G) over many bit lengths."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import affine

from exactmem.constructions import _gadget_c1 as c1
from exactmem.constructions._gadgets import (
    Program,
    interval_indicator,
    label_select,
    tent_bit_extraction,
    threshold_bit_extraction,
    unit_interval_test,
)
from exactmem.constructions._projection import stage_one_projection
from exactmem.errors import ConstructionError
from exactmem.model.forward import dense_feedforward
from exactmem.model.spec import FeedForward

SETTINGS = settings(max_examples=30, deadline=None)


def run(ff: FeedForward, inputs: list[list[Fraction]]) -> list[list[Fraction]]:
    """The fast evaluation, checked against the naive Fraction reference on every input."""
    den = 1
    for v in inputs:
        for x in v:
            den = den * x.denominator // math.gcd(den, x.denominator)
    cols = np.array([[int(v[i] * den) for v in inputs] for i in range(len(inputs[0]))],
                    dtype=object)
    out, oden = dense_feedforward(ff, cols, den)
    fast = [[Fraction(int(out[r, q]), oden) for r in range(out.shape[0])]
            for q in range(len(inputs))]
    for q, v in enumerate(inputs):
        ref = list(v)
        for i, a in enumerate(ff.layers):
            ref = affine(a, [max(x, Fraction(0)) for x in ref] if i else ref)
        assert fast[q] == ref
    return fast


rationals = st.fractions(min_value=-50, max_value=50, max_denominator=16)


@SETTINGS
@given(a=st.integers(-20, 20), width=st.integers(1, 10), x=rationals)
def test_interval_indicator(a: int, width: int, x: Fraction) -> None:
    b = a + width
    (y,), = run(interval_indicator(a, b), [[x]])
    if a <= x <= b:
        assert y == 1
    elif x <= a - Fraction(1, 2) or x >= b + Fraction(1, 2):
        assert y == 0
    else:
        assert 0 <= y <= 1


@SETTINGS
@given(x=rationals, y=rationals)
def test_unit_interval_test(x: Fraction, y: Fraction) -> None:
    (out,), = run(unit_interval_test(), [[x, y]])
    if y <= x <= y + 1:
        assert out == 1
    elif x < y - Fraction(1, 2) or x > y + Fraction(3, 2):
        assert out == 0


@SETTINGS
@given(c=st.integers(1, 12), data=st.data())
def test_label_select(c: int, data: st.DataObject) -> None:
    v = data.draw(st.integers(0, (1 << c) - 1))
    r = data.draw(st.integers(0, 1000))
    x = data.draw(st.fractions(min_value=0, max_value=1003, max_denominator=32))
    (out,), = run(label_select(c), [[x, Fraction(r), Fraction(v)]])
    if r <= x < r + 1:
        assert out == v
    elif x < r - Fraction(1, 2) or x > r + Fraction(3, 2):
        assert out == 0


def _bits(u: int, n: int) -> list[int]:
    return [(u >> (n - 1 - q)) & 1 for q in range(n)]


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 40), data=st.data())
def test_threshold_bit_extraction(n: int, data: st.DataObject) -> None:
    us = data.draw(st.lists(st.integers(0, (1 << n) - 1), min_size=1, max_size=6))
    us += [0, (1 << n) - 1]
    out = run(threshold_bit_extraction(n), [[Fraction(u)] for u in us])
    assert [[int(b) for b in row] for row in out] == [_bits(u, n) for u in us]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 24), data=st.data())
def test_tent_bit_extraction(n: int, data: st.DataObject) -> None:
    us = data.draw(st.lists(st.integers(0, (1 << n) - 1), min_size=1, max_size=4))
    us += [0, (1 << n) - 1]
    out = run(tent_bit_extraction(n), [[Fraction(u)] for u in us])
    assert [[int(b) for b in row] for row in out] == [_bits(u, n) for u in us]


@SETTINGS
@given(seed=st.integers(0, 10 ** 6), d=st.integers(1, 4), count=st.integers(1, 40))
def test_stage_one_projection_separates(seed: int, d: int, count: int) -> None:
    rng = random.Random(seed)
    pts = list({tuple(Fraction(rng.randint(-9, 9), rng.choice((1, 2, 3))) for _ in range(d))
                for _ in range(count)})
    proj = stage_one_projection(pts, rng)
    vals = sorted(sum((w * x for w, x in zip(proj.weight, p, strict=True)), proj.bias)
                  for p in pts)
    assert vals == sorted(proj.values)
    assert vals[0] >= 2
    assert all(b - a >= 2 for a, b in zip(vals, vals[1:], strict=False))


def test_projection_refuses_duplicates() -> None:
    with pytest.raises(ConstructionError, match="distinct"):
        stage_one_projection([(Fraction(1),), (Fraction(1),)], random.Random(0))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10 ** 6), count=st.integers(1, 40), zeros=st.integers(0, 20),
       block=st.integers(0, 9), classes=st.integers(1, 40))
def test_lemma_c1_memorizes_and_zeroes(seed: int, count: int, zeros: int, block: int,
                                       classes: int) -> None:
    rng = random.Random(seed)
    pool: set[Fraction] = set()
    while len(pool) < 4 * (count + zeros):
        pool.add(Fraction(rng.randint(6, 60 * (count + zeros)), rng.choice((1, 2, 3))))
    pts: list[Fraction] = []
    for p in sorted(pool):
        if not pts or p - pts[-1] >= 2:
            pts.append(p)
    rng.shuffle(pts)
    xs, zs = pts[:count], pts[count:count + zeros]
    ys = [rng.randint(1, classes) for _ in xs]
    prog = Program(["x"])
    lay, out = c1.emit(prog, xs, ys, zs, block_size=block or None)
    prog.step({"y": out})
    ff = prog.feedforward()
    assert len(ff.layers) == lay.depth + 1
    assert max(a.out_dim for a in ff.layers) <= 12
    got = run(ff, [[x] for x in [*xs, *zs]])
    assert [r[0] for r in got] == [*ys, *([0] * len(zs))]


def test_lemma_c1_refuses_close_points() -> None:
    with pytest.raises(ConstructionError, match="2 apart"):
        c1.emit(Program(["x"]), [Fraction(3), Fraction(4)], [1, 1])
    with pytest.raises(ConstructionError, match="labels >= 1"):
        c1.emit(Program(["x"]), [Fraction(3)], [0])


def test_chain_refuses_points_and_labels_of_other_counts() -> None:
    from exactmem.constructions._gadget_chain import emit_chain

    with pytest.raises(ConstructionError, match="3 points but 2 labels"):
        emit_chain(Program(["x"]), [Fraction(2), Fraction(4), Fraction(6)], [1, 2])
