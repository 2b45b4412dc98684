"""The split producer (``producer="auto"``): arb for the first blocks, float64 norm balls
from a chosen block, climbing where a position is left short.  It proves exactly what arb
proves, from every switch block; the norm-ball steps it adds are sound (exact rationals as
the reference)."""

from __future__ import annotations

from fractions import Fraction

import flint
import numpy as np
import pytest
from lm_models import random_spec

from exactmem.lm import normballs as N
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import label_margin, logits64
from exactmem.lm.normball_steps import NBall, centred_spread, gain_times, norm_up
from exactmem.lm.positions import prove_positions
from exactmem.lm.split import choose_switch, to_nball

FIELDS = ("vocab_size", "context", "d_model", "heads", "layers", "d_ff", "activation",
          "layer_norm_eps", "tied_head")


def sharp(scale: float) -> LMSpec:
    """A random decoder with attention and first MLP weights ``scale`` times larger: sharp
    attention stretches rounding errors, so float64 norm balls from the embedding fall
    short (scale 256: they prove nothing) while arb proves every position."""
    base = random_spec(np.random.default_rng(3), "gelu_tanh", tied=True)
    t = {k: v * scale if k.endswith(("attn.weight", "mlp.fc.weight")) else v
         for k, v in base.tensors.items()}
    return LMSpec(**{f: getattr(base, f) for f in FIELDS}, tensors=t)


def data(spec: LMSpec) -> tuple[list[list[int]], list[list[int]]]:
    toks = np.random.default_rng(4).integers(0, spec.vocab_size, size=(12, 8))
    labels = [list(map(int, r)) for r in logits64(spec, toks).argmax(-1)]
    labels[2][5] = (labels[2][5] + 1) % spec.vocab_size  # a wrong label: never proved
    return [list(map(int, s)) for s in toks], labels


def pairs(proved: tuple[tuple[int, ...], ...]) -> set[tuple[int, int]]:
    return {(i, p) for i, row in enumerate(proved) for p in row}


@pytest.mark.parametrize("scale", [1.0, 64.0, 256.0])
def test_auto_proves_what_arb_proves_from_every_switch(scale: float) -> None:
    spec = sharp(scale)
    seqs, labels = data(spec)
    arb = pairs(prove_positions(spec, seqs, labels, producer="arb", batch=5).proved)
    fast = prove_positions(spec, seqs, labels, producer="fast", batch=5)
    assert (2, 5) not in arb and len(arb) == 95
    given = label_margin(logits64(spec, np.array(seqs)), np.array(labels))
    for switch in (None, 0, 1, 2):
        got = prove_positions(spec, seqs, labels, batch=5, switch=switch,
                              float_margins=given if switch in (None, 1) else None)
        assert pairs(got.proved) == arb, (scale, switch)
        assert got.switch is not None and (switch is None or got.switch == switch)
        assert all(m <= 0 for _, m in got.failed[2])  # only the wrong label is left
    if scale == 256.0:
        assert fast.count == 0  # so the proofs above came from arb blocks and climbing
        assert prove_positions(spec, seqs, labels, batch=5, switch=0).rerun > 0


def test_choose_switch_follows_the_float64_shortfall() -> None:
    """Float64 from the embedding when it proves what arb does; later when it proves
    nothing."""
    spec = sharp(256.0)
    assert choose_switch(N.NormWeights(spec), *data(spec)) >= 1
    spec = sharp(1.0)
    assert choose_switch(N.NormWeights(spec), *data(spec)) == 0
    with pytest.raises(ValueError, match="switch"):
        prove_positions(spec, *data(spec), switch=3)


def exact(x: flint.arb) -> Fraction:
    man, exp = x.man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def test_to_nball_encloses_the_arb_balls() -> None:
    rng = np.random.default_rng(7)
    old = flint.ctx.prec
    flint.ctx.prec = 128
    try:
        rows = [[flint.arb(float(v)) / 3 + flint.arb(0, float(r))  # 128-bit midpoints
                 for v, r in zip(rng.normal(0, 5, 6), np.abs(rng.normal(0, 1e-3 * (i % 2), 6)),
                                 strict=True)] for i in range(4)]  # rows 1, 3: wide balls
        m, rho = to_nball(rows, 2, 2)
        for i, row in enumerate(rows):
            for corner in range(8):  # points at the ball ends, exactly
                pt = [exact(x.mid())
                      + (1 if (corner >> (j % 3)) & 1 else -1)
                      * Fraction(float(x.rad())) for j, x in enumerate(row)]
                dist2 = sum((p - Fraction(float(mm))) ** 2
                            for p, mm in zip(pt, m.reshape(4, 6)[i], strict=True))
                assert dist2 <= Fraction(float(rho.reshape(4)[i])) ** 2
    finally:
        flint.ctx.prec = old


def test_centred_spread_bounds_the_weighted_sum() -> None:
    """``||sum_j w_j vm_j - om_p|| <= rounding of om + centred_spread`` for exact weight rows
    summing to 1 inside the weight balls (exact rationals as the reference)."""
    from exactmem.lm import balls as I

    rng = np.random.default_rng(8)
    for trial in range(20):
        n, dh = 5, 4
        scores = rng.normal(0, 4 if trial % 2 else 0.3, (1, 1, n, n))
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        wr = np.abs(rng.normal(0, 1e-3, w.shape))
        wm = np.clip(w + wr * rng.uniform(-1, 1, w.shape), 0.0, None)
        wr = wr + np.abs(wm - w)  # so |w - wm| <= wr
        vm = rng.normal(0, 3, (1, 1, n, dh)) if trial % 4 < 2 else \
            10 + rng.normal(0, 1e-4, (1, 1, n, dh))  # close values: the weight-sum defect counts
        om, orad = I.matmul(I.exact(wm), I.exact(vm))
        bound = norm_up(orad) + centred_spread(wm, wr, vm, om)
        for p in range(n):
            ws = [Fraction(float(x)) for x in w[0, 0, p]]
            ws[-1] = 1 - sum(ws[:-1])  # an exact weight row summing to 1, inside the balls
            assert abs(ws[-1] - Fraction(float(wm[0, 0, p, -1]))) <= Fraction(
                float(wr[0, 0, p, -1]))
            out = [sum(ws[j] * Fraction(float(vm[0, 0, j, c])) for j in range(n))
                   - Fraction(float(om[0, 0, p, c])) for c in range(dh)]
            assert sum(x * x for x in out) <= Fraction(float(bound[0, 0, p])) ** 2


@pytest.mark.parametrize("norm_first", [True, False])
def test_norm_balls_of_real_radius_enclose_points(norm_first: bool) -> None:
    """A norm ball of radius 2e-4 entering block 1: arb's logits of points drawn in it (at
    distance 2e-4 or less) lie in the norm-ball pass's logit bounds.  Exercises every
    Lipschitz step (the gained norm products, the centred attention, GELU's 1.14)."""
    base = random_spec(np.random.default_rng(11), "gelu_tanh", tied=True)
    spec = LMSpec(**{**{f: getattr(base, f) for f in FIELDS}, "norm_first": norm_first},
                  tensors=base.tensors)
    rng = np.random.default_rng(12)
    n, d, rho = 8, spec.d_model, 2e-4
    mid = rng.normal(0, 1.5, (2, n, d))
    w = N.NormWeights(spec)
    x: NBall = (mid, np.full((2, n), rho))
    x = N.layer(w, x, 1)
    lo, hi = N.decide(*N.head_bounds(w, x), np.zeros((2, n), dtype=np.int64))[2:]
    from exactmem.lm.arb import ArbNet

    net = ArbNet(spec)
    old = flint.ctx.prec
    flint.ctx.prec = 128
    try:
        widest = 0.0
        for _ in range(3):
            step = rng.normal(0, 1, (2, n, d))
            step *= rho * rng.uniform(0.9, 0.999) / np.linalg.norm(step, axis=-1, keepdims=True)
            pt = mid + step  # within rho: 0.999 leaves room for the float rounding of step
            rows = net.layer([[flint.arb(v) for v in r] for r in pt.reshape(-1, d).tolist()],
                             1, n)
            logits = net.logits(rows)
            for k, row in enumerate(logits):
                s, p = divmod(k, n)
                for c, v in enumerate(row):
                    assert flint.arb(lo[s, p, c]) <= v.lower() and v.upper() <= hi[s, p, c]
                    widest = max(widest, float(hi[s, p, c] - lo[s, p, c]))
        assert widest < 10  # a real bound, not an infinite one
    finally:
        flint.ctx.prec = old


def test_gained_norms() -> None:
    """``diag(g) W`` is used only when exact (float32 factors), and its bound lies above the
    true 2-norm (SVD as the float reference) and below ``max|g| ||W||``."""
    rng = np.random.default_rng(13)
    g32 = (1 + rng.normal(0, 0.3, 16)).astype(np.float32).astype(np.float64)
    w32 = rng.normal(0, 0.5, (16, 24)).astype(np.float32).astype(np.float64)
    p = gain_times(g32, w32)
    assert p is not None and np.array_equal(p, g32[:, None] * w32)
    assert gain_times(rng.normal(size=16), rng.normal(size=(16, 24))) is None
    assert gain_times(np.full(4, 2.0 ** -600), np.full((4, 2), 2.0 ** -500)) is None
    base = random_spec(np.random.default_rng(14), "gelu_tanh", tied=True)
    w = N.NormWeights(base)
    g, wf = base.get("h0.ln2.weight"), base.get("h0.mlp.fc.weight")
    true = float(np.linalg.norm(g[:, None] * wf, 2))
    assert true <= float(w.gained["h0.mlp.fc"]) <= float(np.abs(g).max()) * w.spectral["h0.mlp.fc"]
    rows = np.linalg.norm(base.get("lnf.weight")[None, :] * base.get("wte"), axis=1)
    assert (rows <= w.gained["head"]).all()
