"""The fast producer (float64 numpy balls): every enclosure contains python-flint arb's value,
fast proves only what arb proves (within 1% of its count), and ``producer="hybrid"`` proves
what arb does."""

from __future__ import annotations

import flint
import numpy as np
import pytest
from lm_models import random_spec

from exactmem.lm import arb as A
from exactmem.lm import ball_steps as F
from exactmem.lm import balls as I
from exactmem.lm.float64 import logits64
from exactmem.lm.positions import PositionBounds, prove_positions


@pytest.fixture(autouse=True)
def prec() -> object:
    old = flint.ctx.prec
    flint.ctx.prec = 200
    yield
    flint.ctx.prec = old


def inside(lo: float, hi: float, v: flint.arb) -> bool:
    """The arb ball ``v`` (containing the real value) meets ``[lo, hi]`` only inside it."""
    return bool(flint.arb(lo) <= v.lower() and v.upper() <= flint.arb(hi))


def test_exp_tanh_erf_enclose_arb() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 3, 3000), rng.uniform(-40, 5, 2000),
                        [0.0, -0.0, 1e-300, -745.0, -701.0, 705.0, 5.9, 6.0, 6.5, -6.1, 1e-8]])
    lo, hi = I.exp_interval(x, x)
    t = I.tanh_ball(I.exact(x))
    e = I.erf_ball(I.exact(x))
    for k, v in enumerate(x.tolist()):
        a = flint.arb(v)
        assert inside(lo[k], hi[k], a.exp())
        assert inside(*I.lohi((t[0][k], t[1][k])), a.tanh())
        assert inside(*I.lohi((e[0][k], e[1][k])), a.erf())
    big = np.abs(x) < 700
    assert float((hi[big] / lo[big]).max()) < 1 + 2.0 ** -40  # tight, not just sound


def test_layernorm_and_products_enclose_arb() -> None:
    """Points drawn inside the input balls: arb's exact image lies in the output ball."""
    rng = np.random.default_rng(1)
    m = rng.normal(0, 2, (3, 16))
    r = np.abs(rng.normal(0, 1e-6, (3, 16)))
    g, b = rng.normal(1, 0.3, 16), rng.normal(0, 0.3, 16)
    w = rng.normal(0, 0.5, (16, 5))
    ln = F.layernorm((m, r), g, b, 1e-5)
    prod = I.matmul_exact((m, r), w, np.abs(w))
    for _ in range(4):
        pt = m + r * rng.uniform(-1, 1, m.shape)
        for row in range(3):
            xs = [flint.arb(v) for v in pt[row].tolist()]
            mu = sum(xs) / 16
            s = (sum((v - mu) ** 2 for v in xs) / 16 + flint.arb(1e-5)).rsqrt()
            for i in range(16):
                want = (xs[i] - mu) * s * g[i] + b[i]
                assert inside(*I.lohi((ln[0][row, i], ln[1][row, i])), want)
            for j in range(5):
                want = sum((xs[i] * w[i, j] for i in range(16)), flint.arb(0))
                assert inside(*I.lohi((prod[0][row, j], prod[1][row, j])), want)


@pytest.mark.parametrize("act", ["gelu_tanh", "gelu_erf"])
def test_logit_bounds_enclose_arb_logits(act: str) -> None:
    """The whole forward pass: the numpy logit bounds contain arb's logit balls."""
    spec = random_spec(np.random.default_rng(1), act, tied=False)
    toks = np.random.default_rng(2).integers(0, spec.vocab_size, size=(2, 8))
    got: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    prove_positions(spec, [list(map(int, s)) for s in toks], toks.tolist(),
                    on_logits=lambda i, lo, hi: got.__setitem__(i, (lo, hi)), producer="fast")
    flint.ctx.prec = A.PREC
    net = A.ArbNet(spec)
    x = net.embed(toks.tolist())
    for i in range(spec.layers):
        x = net.layer(x, i, 8)
    logits = net.logits(x)
    assert sorted(got) == [0, 1] and got[0][0].shape == (8, spec.vocab_size)
    for s in range(2):
        lo, hi = got[s]
        for p in range(8):
            for c in range(spec.vocab_size):
                assert inside(lo[p, c], hi[p, c], logits[s * 8 + p][c])


@pytest.mark.parametrize("act", ["gelu_tanh", "gelu_erf"])
def test_fast_proves_what_arb_proves(act: str) -> None:
    spec = random_spec(np.random.default_rng(3), act, tied=True)
    toks = np.random.default_rng(4).integers(0, spec.vocab_size, size=(12, 8))
    labels = [list(map(int, r)) for r in logits64(spec, toks).argmax(-1)]
    labels[2][5] = (labels[2][5] + 1) % spec.vocab_size
    seqs = [list(map(int, s)) for s in toks]

    def pairs(pb: PositionBounds) -> set[tuple[int, int]]:
        return {(i, p) for i, r in enumerate(pb.proved) for p in r}

    arb = pairs(prove_positions(spec, seqs, labels, producer="arb", batch=5))
    fast = pairs(prove_positions(spec, seqs, labels, batch=5))
    hybrid = pairs(prove_positions(spec, seqs, labels, producer="hybrid", batch=5))
    assert (2, 5) not in arb | hybrid
    assert fast <= arb and len(fast) >= 0.99 * len(arb)
    assert fast <= hybrid == arb


def test_unknown_producer() -> None:
    spec = random_spec(np.random.default_rng(3), "gelu_tanh", tied=True)
    with pytest.raises(ValueError, match="producer"):
        prove_positions(spec, [[0]], [[0]], producer="float")


def test_spectral_norm_bound() -> None:
    """Above the 2-norm (numpy's SVD as the float reference) and within 5% of it; far below
    the entry-wise bound ``max column sum of |W|`` that entry-wise radii pay per layer."""
    from exactmem.lm.normballs import spectral_up

    rng = np.random.default_rng(5)
    for shape in [(32, 96), (128, 512), (512, 128), (7, 1)]:
        w = rng.normal(0, 0.05, shape).astype(np.float32).astype(np.float64)
        two = float(np.linalg.norm(w, 2))
        assert two <= spectral_up(w) <= 1.05 * two
    w = rng.normal(0, 0.05, (512, 128))
    assert spectral_up(w) < np.abs(w).sum(0).max() / 5
    assert spectral_up(np.zeros((3, 4))) == 0.0


def test_huge_weights_prove_nothing_wrongly() -> None:
    """Weights large enough to overflow float64 bounds: no warning, no crash, and every
    position fast proves is one arb proves (an infinite or NaN bound proves nothing)."""
    base = random_spec(np.random.default_rng(6), "gelu_tanh", tied=True)
    tensors = {k: (v * 1e150 if k.endswith("mlp.fc.weight") else v)
               for k, v in base.tensors.items()}
    spec = type(base)(**{**{f: getattr(base, f) for f in (
        "vocab_size", "context", "d_model", "heads", "layers", "d_ff", "activation",
        "layer_norm_eps", "tied_head")}, "tensors": tensors})
    toks = np.random.default_rng(7).integers(0, spec.vocab_size, size=(4, 8))
    seqs = [list(map(int, s)) for s in toks]
    seen: list[bool] = []
    fast = prove_positions(spec, seqs, seqs, on_logits=lambda i, lo, hi: seen.append(
        bool(np.isfinite(lo).all())))
    arb = prove_positions(spec, seqs, seqs, producer="arb")
    assert len(seen) == 4 and not any(seen)  # the bounds did overflow
    for a, b in zip(fast.proved, arb.proved, strict=True):
        assert set(a) <= set(b)


def test_gelu_derivative_bound() -> None:
    """``|GELU'| <= GELU_LIP`` on ``[-10, 10]``, both forms, by arb's interval evaluation of
    the derivative over sub-intervals of width 1/64 (the tails beyond are in the constant's
    docstring); and the bound is not loose by more than 2% (the sup is about 1.1289)."""
    c = (2 / flint.arb.pi()).sqrt()
    a = flint.arb(flint.fmpq(44715, 10 ** 6))
    inv_sqrt2pi = 1 / (2 * flint.arb.pi()).sqrt()
    top = flint.arb(0)
    for k in range(-640, 640):
        x = flint.arb(flint.fmpq(2 * k + 1, 128), flint.arb(1) / 128)  # [k/64, (k+1)/64]
        y = 2 * c * (x + a * x ** 3)
        s = 1 / (1 + (-y).exp())
        tanh_form = s + x * s * (1 - s) * 2 * c * (1 + 3 * a * x ** 2)
        erf_form = (1 + (x / flint.arb(2).sqrt()).erf()) / 2 + x * (-(x ** 2) / 2).exp() \
            * inv_sqrt2pi
        for d in (tanh_form, erf_form):
            assert d.upper() <= F.GELU_LIP and d.lower() >= -F.GELU_LIP
            top = max(top, d.upper().mid())
    assert float(top) > F.GELU_LIP / 1.02
