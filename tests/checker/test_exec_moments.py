"""The LayerNorm statistics bound of ``lm_exec_moments`` against float32 merge trees run in
numpy: random tree shapes and orientations, Welford steps and Chan merges, data with a large
offset and a small spread (where the statistics lose the most); every computed mean and
variance lies within the checker's bounds of the exact ones (Fractions)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker.lm.lm_exec_moments import mean_error, variance_error

f32 = np.float32


def _tree(xs: list[np.float32], rng: np.random.Generator) -> tuple[int, np.float32, np.float32]:
    """``(n, mean, M2)`` of ``xs`` by a random merge tree in float32: a random split, each
    part by a tree, joined by Chan's update in a random orientation; runs of Welford steps
    at random."""
    if len(xs) == 1:
        return 1, xs[0], f32(0)
    if rng.random() < 0.3:  # Welford steps over the whole part, as torch's inner loop
        n, mean, m2 = 1, xs[0], f32(0)
        for x in xs[1:]:
            n += 1
            delta = f32(x - mean)
            mean = f32(mean + f32(delta * f32(1.0 / n)))
            m2 = f32(m2 + f32(delta * f32(x - mean)))
        return n, mean, m2
    cut = int(rng.integers(1, len(xs)))
    a, b = _tree(xs[:cut], rng), _tree(xs[cut:], rng)
    if rng.random() < 0.5:
        a, b = b, a
    (na, ma, qa), (nb, mb, qb) = a, b
    n = na + nb
    delta = f32(mb - ma)
    mean = f32(ma + f32(delta * f32(nb / n)))
    m2 = f32(f32(qa + qb) + f32(f32(delta * delta) * f32(na * nb / n)))
    return n, mean, m2


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 96), st.floats(-50, 50), st.floats(1e-3, 10), st.integers(0, 2**31))
def test_every_merge_tree_is_within_the_bounds(d: int, offset: float, spread: float,
                                               seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs = [f32(v) for v in offset + spread * rng.standard_normal(d)]
    exact = [Fraction(float(x)) for x in xs]
    mu = sum(exact) / d
    var = sum((x - mu) ** 2 for x in exact) / d
    xinf = max(abs(x) for x in exact)
    e = mean_error(d, xinf)
    bound = variance_error(d, xinf, e, var)
    for _ in range(4):
        n, mean, m2 = _tree(xs, rng)
        assert n == d
        assert abs(Fraction(float(mean)) - mu) <= e
        got = Fraction(float(f32(m2 / f32(d))))
        assert abs(got - var) <= bound, (float(abs(got - var)), float(bound))


def test_the_bounds_are_not_vacuous() -> None:
    """At d = 128, values within 1 of an offset 4: the variance bound is a small fraction
    of the variance (it could prove nothing otherwise)."""
    d, xinf, var = 128, Fraction(5), Fraction(1, 3)
    e = mean_error(d, xinf)
    assert e < Fraction(1, 10**3)
    assert variance_error(d, xinf, e, var) < var / 100
