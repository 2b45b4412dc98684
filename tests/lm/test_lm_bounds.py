"""The checker's rigorous bounds for language models contain the true values (mpmath at
400 bits), and its forward pass contains the model's function."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_models import checker_norm_case, random_spec

from exactmem.checker.lm import lm_attention
from exactmem.checker.lm import lm_bounds as B
from exactmem.checker.lm import lm_forward as L

mpmath.mp.prec = 400
FS = st.sampled_from([32, 64, 128])


def real(x: int, f: int) -> mpmath.mpf:
    return mpmath.mpf(x) / mpmath.mpf(2) ** f


def contains(bounds: tuple[int, int], value: mpmath.mpf, f: int) -> bool:
    lo, hi = bounds
    return lo <= value * mpmath.mpf(2) ** f <= hi


@settings(max_examples=300, deadline=None)
@given(FS, st.integers(-(80 << 20), 80 << 20), st.integers(0, 80))
def test_exp_contains_the_true_value(f: int, x: int, shift: int) -> None:
    x = (x << f) >> (20 + shift)
    b = B.exp(x, f)
    assert contains(b, mpmath.exp(real(x, f)), f)
    if abs(x) < 4 << f:
        assert b[1] - b[0] <= 4


@settings(max_examples=300, deadline=None)
@given(FS, st.integers(-(40 << 20), 40 << 20), st.integers(0, 80))
def test_tanh_contains_the_true_value(f: int, x: int, shift: int) -> None:
    x = (x << f) >> (20 + shift)
    b = B.tanh(x, f)
    assert contains(b, mpmath.tanh(real(x, f)), f) and b[1] - b[0] <= 8


@settings(max_examples=200, deadline=None)
@given(FS, st.integers(-(12 << 20), 12 << 20), st.integers(0, 80))
def test_erf_contains_the_true_value(f: int, x: int, shift: int) -> None:
    x = (x << f) >> (20 + shift)
    b = B.erf(x, f)
    assert contains(b, mpmath.erf(real(x, f)), f) and b[1] - b[0] <= 8


@settings(max_examples=200, deadline=None)
@given(FS, st.integers(1, 1 << 40), st.integers(0, 1 << 20))
def test_rsqrt_and_constants_contain_the_true_values(f: int, v: int, w: int) -> None:
    v2 = v << (2 * f - 20)
    lo, hi = B.rsqrt(v2, v2 + w, f)
    assert lo * mpmath.sqrt(real(v2 + w, 2 * f)) <= mpmath.mpf(2) ** f
    assert hi * mpmath.sqrt(real(v2, 2 * f)) >= mpmath.mpf(2) ** f
    assert contains(B.sqrt_two_over_pi(f), mpmath.sqrt(2 / mpmath.pi), f)
    assert contains(B.two_over_sqrt_pi(f), 2 / mpmath.sqrt(mpmath.pi), f)
    assert contains(B.sqrt_const(1, v, f), mpmath.sqrt(mpmath.mpf(1) / v), f)


def test_a_wrong_bound_is_caught_by_the_reference() -> None:
    lo, hi = B.exp(1 << 64, 64)
    assert not contains((lo + 2, hi), mpmath.exp(1), 64)


def _ball_contains(mids: list[int], rad: int, values: list[mpmath.mpf]) -> bool:
    return all(abs(v * mpmath.mpf(2) ** L.F - m) <= rad for m, v in zip(mids, values, strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(3 << 20), 3 << 20), min_size=2, max_size=12),
       st.integers(0, 1 << 20), st.randoms(use_true_random=False))
def test_layernorm_ball_contains_every_point(xs: list[int], r: int, rnd) -> None:  # type: ignore[no-untyped-def]
    d = len(xs)
    m, g, b, params, eps, epsb = checker_norm_case(xs, rnd)
    mids, rad = L.layernorm(params, m, r, epsb)
    for _ in range(3):
        x = [real(v + rnd.randint(-r, r), L.F) for v in m]
        mu = sum(x) / d
        var = sum((v - mu) ** 2 for v in x) / d
        s = 1 / mpmath.sqrt(var + mpmath.mpf(eps.numerator) / eps.denominator)
        y = [(v - mu) * s * gi / 2 ** 8 + bi / mpmath.mpf(2) ** 9
             for v, gi, bi in zip(x, g, b, strict=True)]
        assert _ball_contains(mids, rad, y)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(8 << 20), 8 << 20), min_size=1, max_size=8),
       st.integers(0, 1 << 30), st.sampled_from(["gelu_tanh", "gelu_erf"]),
       st.randoms(use_true_random=False))
def test_gelu_ball_contains_every_point(xs: list[int], r: int, kind: str, rnd) -> None:  # type: ignore[no-untyped-def]
    m = [x << (L.F - 20) for x in xs]
    mids, rad = L.gelu(kind, m, r, L.constants(4))
    for _ in range(3):
        x = [real(v + rnd.randint(-r, r), L.F) for v in m]
        if kind == "gelu_tanh":
            c = mpmath.sqrt(2 / mpmath.pi)
            y = [v / 2 * (1 + mpmath.tanh(c * (v + mpmath.mpf(44715) / 10 ** 6 * v ** 3)))
                 for v in x]
        else:
            y = [v / 2 * (1 + mpmath.erf(v / mpmath.sqrt(2))) for v in x]
        assert _ball_contains(mids, rad, y)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(20 << 20), 20 << 20), min_size=1, max_size=10),
       st.integers(0, 1 << 40), st.randoms(use_true_random=False))
def test_softmax_weights_contain_every_point(ss: list[int], r: int, rnd) -> None:  # type: ignore[no-untyped-def]
    s = [x << (L.F - 20) for x in ss]
    w = lm_attention.softmax_weights(s, r, L.F)
    assert w is not None
    for _ in range(3):
        x = [real(v + rnd.randint(-r, r), L.F) for v in s]
        e = [mpmath.exp(v) for v in x]
        a = [v / sum(e) for v in e]
        assert all(contains(b, v, L.F) for b, v in zip(w, a, strict=True))


def test_the_forward_pass_contains_the_float64_logits() -> None:
    """A random pre-LN decoder (no checkpoint needed): the checker's logit balls hold the
    float64 logits up to float64's own error, and the radii are tiny."""
    from exactmem.checker.lm import lm_verify
    from exactmem.lm.certfile import build_lm_certificate
    from exactmem.lm.float64 import logits64
    from exactmem.model.dataset import Dataset

    spec = random_spec(np.random.default_rng(5), "gelu_erf", tied=False)
    toks = np.random.default_rng(6).integers(0, spec.vocab_size, size=(2, 6))
    ref = logits64(spec, toks)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                 sequences=tuple(tuple(map(int, s)) for s in toks),
                 labels=tuple(tuple(map(int, r)) for r in ref.argmax(-1)))
    cert = build_lm_certificate(spec, ds, [list(range(6))] * 2, True)
    net = lm_verify.model(cert["model"])
    for i in range(2):
        out = L.logits(net, [int(t) for t in toks[i]], list(range(6)))
        for p in range(6):
            mids, rad = out[p]
            assert rad < 2 ** (L.F - 60)
            assert np.abs(np.array(mids, dtype=object) / 2 ** L.F - ref[i, p]).max() < 1e-9


@pytest.mark.parametrize("act", ["gelu_tanh", "gelu_erf"])
def test_producer_and_checker_agree_on_a_random_model(act: str) -> None:
    """The arb producer and the stdlib checker, sharing no code, prove the same positions
    (labels: the float64 argmax; one label made wrong is proved by neither)."""
    from exactmem.checker.lm.lm_verify import check
    from exactmem.lm.certfile import build_lm_certificate
    from exactmem.lm.float64 import logits64
    from exactmem.lm.positions import prove_positions
    from exactmem.model.dataset import Dataset

    spec = random_spec(np.random.default_rng(1), act, tied=True)
    toks = np.random.default_rng(2).integers(0, spec.vocab_size, size=(3, 8))
    labels = [list(map(int, r)) for r in logits64(spec, toks).argmax(-1)]
    labels[1][4] = (labels[1][4] + 1) % spec.vocab_size
    seqs = tuple(tuple(map(int, s)) for s in toks)
    pb = prove_positions(spec, seqs, labels)
    assert 4 not in pb.proved[1] and pb.count >= 20
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                 sequences=seqs, labels=tuple(map(tuple, labels)))
    everything = [list(range(8))] * 3
    unproved: list[tuple[int, int]] = []
    bad, unusable, claim = check(build_lm_certificate(spec, ds, everything, True), None,
                                 unproved=unproved)
    assert not unusable and claim is None
    proved_by_checker = {(i, p) for i in range(3) for p in range(8)} - set(unproved)
    assert proved_by_checker == {(i, p) for i, r in enumerate(pb.proved) for p in r}


@contextlib.contextmanager
def _prec(bits: int) -> Iterator[None]:
    """arb's working precision for one block (the producer's tests set their own)."""
    import flint

    old = flint.ctx.prec
    flint.ctx.prec = bits
    try:
        yield
    finally:
        flint.ctx.prec = old


def _arb_contains(bounds: tuple[int, int], value: object, f: int) -> bool:
    """``lo <= 2**f value <= hi`` for every point of the arb ball ``value`` (exact endpoints
    compared as rationals)."""
    import flint

    lo, hi = bounds
    scaled = value * flint.arb(2) ** f  # type: ignore[operator]
    return bool(scaled >= lo) and bool(scaled <= hi)


@settings(max_examples=400, deadline=None)
@given(st.integers(8, B.TABLE_P - 16), st.integers(1, 1 << 60), st.integers(0, 70))
def test_table_exp_contains_arb(f: int, x: int, shift: int) -> None:
    """The table-driven e**-u (every f the forward pass uses) against arb at 600 bits."""
    import flint

    u = (x << f) >> (50 + shift)  # up to 2**10, well past 0.7 f for small f
    if u == 0:
        return
    b = B.exp(-u, f)
    with _prec(600):
        assert _arb_contains(b, (-flint.arb(u) / flint.arb(2) ** f).exp(), f)
    if 10 * u < 7 * f << f:
        assert b[1] - b[0] <= 3


@settings(max_examples=300, deadline=None)
@given(st.integers(-(40 << 40), 40 << 40), st.integers(0, 1 << 100), st.booleans())
def test_tanh_and_erf_at_the_radius_contain_arb(z: int, zr: int, erf: bool) -> None:
    """tanh / erf at the working precision a radius calls for (lm_bounds.at_radius)."""
    import flint

    z = (z << L.F) >> 40
    fn, lip = (B.erf, 2) if erf else (B.tanh, 1)
    b = B.at_radius(fn, z, zr, lip, L.F)
    with _prec(3000):  # erf(40) = 1 - 2**-2300: resolved, so the ball is not across 1
        x = flint.arb(z) / flint.arb(2) ** L.F
        assert _arb_contains(b, x.erf() if erf else x.tanh(), L.F)
    assert b[1] - b[0] <= max(8, lip * zr >> (B.SLACK - 3))


@pytest.mark.parametrize("f", [150, 151, 256, 512, 1024])
def test_the_constants_of_pi_follow_the_working_precision(f: int) -> None:
    """Beyond 150 bits ``pi`` comes from Machin's formula at ``f + 16`` bits: the constants
    stay within a few units at every precision (50 decimals of ``pi`` capped every GELU and
    erf radius near ``2**-168``)."""
    with mpmath.workprec(f + 64):
        for got, want in ((B.sqrt_two_over_pi(f), mpmath.sqrt(2 / mpmath.pi)),
                          (B.two_over_sqrt_pi(f), 2 / mpmath.sqrt(mpmath.pi))):
            assert contains(got, want, f) and got[1] - got[0] <= 2
        lo, hi = B.pi_bounds(f)
        assert lo <= mpmath.pi * mpmath.mpf(2) ** f <= hi and hi - lo < 4


@pytest.mark.parametrize("kind", ["gelu_tanh", "gelu_erf"])
def test_gelu_of_a_tight_ball_is_tight_at_every_precision(kind: str) -> None:
    for f in (128, 256, 512, 1024):
        m = [3 << (f - 2), -(5 << (f - 3)), 1 << (f - 4)]
        _, r = L.gelu(kind, m, 1 << 10, L.constants(64, f), f)
        assert r.bit_length() - f <= -f + 16, (kind, f)
