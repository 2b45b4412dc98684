"""Array fronts (exactmem.search.finders.front_pool): the vectorized forward agrees with the exact
one, every proposal passes the exact tail test and no passing front is left out, and a
proposed front's tail is fitted whatever the scale of its scores."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from exactmem.checker import check_certificate
from exactmem.model.dataset import Dataset
from exactmem.search.drive.results import ExhaustiveRun
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.encode.encoding_positions import encode_positions
from exactmem.search.finders.front_pool import FrontPool, applies, pool_for
from exactmem.search.finders.transfer import (
    front_of,
    pool_candidates,
    streams,
    tail_separates,
    transfer,
)
from exactmem.search.question.labellings import generate_inputs
from exactmem.search.question.outcome import Assignment
from exactmem.search.question.shape import Shape

SHAPES = [Shape(1, 1, 1, 1, 0, True, "argmax"), Shape(2, 1, 1, 1, 0, True, "argmax"),
          Shape(1, 2, 1, 1, 2, True, "argmax"), Shape(2, 2, 1, 1, 1, True, "argmax")]


def _unlabelled(N: int, n: int, vocab: int) -> Dataset:  # noqa: N803
    return ExhaustiveRun(generate_inputs(N, n, vocab), 3).dataset((0,) * N)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
@pytest.mark.parametrize("n", [2, 3])
def test_the_array_forward_matches_the_exact_forward(shape: Shape, n: int) -> None:
    ds = _unlabelled(8, n, 3)
    pool = FrontPool(ds, shape, seed=n)
    ys = pool._streams(pool._draw(0))  # chunk 0, drawn again as spec() draws it
    for i in range(60):
        exact = [y[0] for y in streams(pool.spec(i, ds), shape, ds)]
        assert np.allclose(ys[i], [float(v) for v in exact], rtol=1e-12, atol=1e-12), i


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: s.label())
def test_candidates_are_exactly_the_fronts_that_pass_the_tail_test(shape: Shape) -> None:
    seqs = generate_inputs(7, 2, 3)
    q = ExhaustiveRun(seqs, 3)
    rng = random.Random(shape.layers * 10 + shape.ff_width)
    pool = pool_for(q.dataset((0,) * 7), shape, seed=5)
    for _ in range(3):
        labels = tuple(rng.randrange(2) for _ in seqs)
        ds = q.dataset(labels)
        got = set(pool.candidates(labels, 150, 150))
        for i in range(150):
            passes = tail_separates(streams(pool.spec(i, ds), shape, ds), labels, shape)
            assert passes is (i in got), (labels, i)


def test_a_fixed_front_with_small_score_gaps_still_gets_its_tail() -> None:
    """A fixed front fixes the scale: its second-layer scores differ by 1/4 here, so the
    comparisons must be strict, not 'apart by the normalised gap of 1'."""
    shape = Shape(2, 1, 1, 1, 0, True, "argmax")
    front = (("embed", ((Fraction(3), Fraction(-4), Fraction(1), Fraction(-1)),)),
             ("att0.0.A", ((Fraction(1),),)), ("att0.0.B", ((Fraction(-3, 4),),)),
             ("att1.0.A", ((Fraction(-1),),)), ("att1.0.B", ((Fraction(1),),)))
    ds = Dataset("next-token", "token-ids", ((0, 3),), (0,), vocab_size=4)
    from exactmem.search.solvers import z3_backend

    problem = encode_positions(ds, shape, EncodeOptions(fixed=front))
    assert isinstance(z3_backend.solve(problem, 60, rlimit=2_000_000), Assignment)


@pytest.mark.parametrize("seed", [0, 1])
def test_two_block_fronts_agree_with_the_solver(seed: int) -> None:
    """On two-block fronts (score gaps below 1 are common) the exact tail test says yes
    exactly when Z3 re-fits a tail, and every re-fit passes the checker."""
    shape = Shape(2, 1, 1, 1, 0, True, "argmax")
    seqs = generate_inputs(6, 2, 3, seed=seed)
    q = ExhaustiveRun(seqs, 3)
    pool = FrontPool(q.dataset((0,) * 6), shape, seed=seed)
    pool._grow()
    rng = random.Random(seed)
    yes = 0
    for i in range(10):
        labels = tuple(rng.randrange(2) for _ in seqs)
        ds = q.dataset(labels)
        spec = pool.spec(i, ds)
        cheap = tail_separates(streams(spec, shape, ds), labels, shape)
        res = transfer(ds, shape, [spec], rlimit=20_000_000, cheap_test=False)
        assert cheap is (res is not None), (labels, front_of(spec, shape))
        if res is not None:
            yes += 1
            assert check_certificate(res.certificate).verified
    assert yes


def test_pool_candidates_use_the_array_pool_where_it_applies() -> None:
    shape = Shape(2, 1, 1, 1, 0, True, "argmax")
    q = ExhaustiveRun(generate_inputs(10, 2, 4), 4)
    ds = q.dataset((0, 1, 0, 1, 0, 1, 1, 0, 0, 1))
    assert applies(ds, shape)
    cands = pool_candidates(ds, shape, count=1_000_000, seed=0, limit=2)
    assert cands
    res = transfer(ds, shape, cands)
    assert res is not None and check_certificate(res.certificate).verified
    assert not applies(ds, Shape(1, 1, 2, 1, 0, True, "argmax"))
    assert not applies(q.dataset((0, 1, 2) + (0,) * 7), shape)


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: s.label())
def test_distance_is_zero_exactly_for_labellings_some_front_serves(shape: Shape) -> None:
    seqs = generate_inputs(8, 2, 4)
    pool = pool_for(ExhaustiveRun(seqs, 4).dataset((0,) * 8), shape, seed=3)
    rng = random.Random(shape.heads * 7 + shape.ff_width)
    for _ in range(40):
        labels = tuple(rng.randrange(2) for _ in seqs)
        d = pool.distance(labels, 2000)
        assert d >= 0
        assert (d == 0) is bool(pool.candidates(labels, 2000, 1)), labels
    alternating = tuple(i % 2 for i in range(8))
    assert pool.distance(alternating, 2000) >= pool.distance((0,) * 8, 2000) == 0
