"""GELU's float64 outward bounds (exactmem/checker/lm/lm_fastgelu.py): the fast ball
contains the standard-library ball of every point it must cover (the ends and the midpoint
of each input ball), over many scales and radii; values beyond its range are left to the
standard-library path."""

from __future__ import annotations

import random

import pytest

from exactmem.checker.lm import lm_fastgelu, lm_forward

F = 128


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_ball_contains_gelu(seed: int) -> None:
    consts = lm_forward.constants(32, F)
    k = lm_fastgelu.constants(consts["c"], F)
    assert k is not None
    rnd = random.Random(seed)
    for _ in range(25):
        scale = rnd.choice([2.0 ** -45, 2.0 ** -30, 1e-3, 0.1, 1.0, 3.0, 8.0, 30.0, 500.0])
        m = [int(rnd.gauss(0, scale) * 2 ** F) for _ in range(24)] + [0, 1, -1, 1 << F]
        r = rnd.choice([1 << 98, 1 << 100, 1 << 110, 1 << 125])
        out = lm_fastgelu.gelu_tanh(m, r, k, F)
        if out is None:
            assert max(map(abs, m)) + r > lm_fastgelu.XMAX << F
            continue
        mids, rad = out
        ref = lm_forward.gelu("gelu_tanh", m, r, consts, F)[1]
        assert rad <= ref + (ref >> 8)  # hardly wider than the standard ball
        for i, x in enumerate(m):
            for point in (x - r, x, x + r):
                (sm,), sr = lm_forward.gelu("gelu_tanh", [point], 0, consts, F)
                assert mids[i] - rad <= sm - sr and sm + sr <= mids[i] + rad


def test_beyond_its_range_or_on_tight_balls_the_standard_path_runs() -> None:
    consts = lm_forward.constants(32, F)
    k = lm_fastgelu.constants(consts["c"], F)
    assert k is not None
    big, wide = [(lm_fastgelu.XMAX << F) + 1], 1 << 100
    assert lm_fastgelu.gelu_tanh(big, wide, k, F) is None
    assert lm_fastgelu.gelu_tanh([1 << F], 1 << 97, k, F) is None  # a tight ball
    assert lm_fastgelu.gelu_tanh([1 << F], wide, k, F) is not None
    fast = dict(consts, fast_gelu=k)
    for m, r in ((big, wide), ([1 << F], 1 << 97)):
        assert lm_forward.gelu("gelu_tanh", m, r, fast, F) == \
            lm_forward.gelu("gelu_tanh", m, r, consts, F)
