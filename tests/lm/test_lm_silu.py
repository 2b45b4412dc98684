"""SiLU ``x / (1 + e^-x)`` (LLaMA's SwiGLU gate) as one operation per domain: every domain
computes it, the ball enclosures contain python-flint arb's value, the norm-ball logits
contain the float64 logits, and a certificate carries it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import flint
import numpy as np
import pytest
from lm_models import random_spec

from exactmem.lm import ball_steps as F
from exactmem.lm import balls as I
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.float64 import logits64
from exactmem.lm.normballs import NormWeights, logit_bounds
from exactmem.lm.positions import prove_positions
from exactmem.model.dataset import Dataset


@pytest.fixture(autouse=True)
def prec() -> object:
    old = flint.ctx.prec
    flint.ctx.prec = 200
    yield
    flint.ctx.prec = old


@pytest.fixture(scope="module")
def silu_spec() -> object:
    return random_spec(np.random.default_rng(5), "silu", tied=False)


def test_the_silu_ball_encloses_arb() -> None:
    rng = np.random.default_rng(0)
    m = np.concatenate([rng.normal(0, 4, 2000), [0.0, -0.0, -745.0, -701.0, 705.0, 40.0]])
    r = np.abs(rng.normal(0, 1e-3, m.shape))
    g = F.silu((m, r))
    lo, hi = I.lohi(g)
    for k in range(len(m)):
        for t in (-1.0, 0.0, 1.0):
            x = flint.arb(float(m[k] + t * r[k] * 0.999))
            v = x / (1 + (-x).exp())
            assert flint.arb(lo[k]) <= v.lower() and v.upper() <= flint.arb(hi[k])
    assert float(np.median(g[1] - F.SILU_LIP * r)) < 1e-12  # tight at the midpoint


def test_silu_derivative_bound() -> None:
    """``|SiLU'| <= SILU_LIP`` on ``[-10, 10]`` by arb's interval evaluation over
    sub-intervals of width 1/64 (the tails are in the constant's docstring), within 2% of
    the sup."""
    top = flint.arb(0)
    for k in range(-640, 640):
        x = flint.arb(flint.fmpq(2 * k + 1, 128), flint.arb(1) / 128)
        s = 1 / (1 + (-x).exp())
        d = s * (1 + x * (1 - s))
        assert d.upper() <= F.SILU_LIP and d.lower() >= -F.SILU_LIP
        top = max(top, d.upper().mid())
    assert float(top) > F.SILU_LIP / 1.02


def test_every_domain_computes_silu(silu_spec: object) -> None:
    """float64, norm balls, arb, torch and ONNX agree on a SiLU model; the rigorous logit
    balls contain the float64 logits."""
    spec = silu_spec
    toks = np.random.default_rng(1).integers(0, spec.vocab_size, (3, spec.context))
    z = logits64(spec, toks)
    gelu = logits64(dataclasses.replace(spec, activation="gelu_erf"), toks)
    assert float(np.abs(z - gelu).max()) > 1e-3  # the activation takes part
    with np.errstate(all="ignore"):
        mid, rad = logit_bounds(NormWeights(spec), toks)
    lo, hi = I.lohi((mid, rad))
    assert (lo <= z).all() and (z <= hi).all() and float(rad.max()) < 1e-6
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    prove_positions(spec, toks.tolist(), z.argmax(-1).tolist(), producer="arb",
                    on_logits=lambda i, a, b: seen.append((a, b)))
    for i, (a, b) in enumerate(seen):  # both contain the exact logits: they meet
        assert (np.maximum(a, lo[i]) <= np.minimum(b, hi[i])).all()
        assert float(np.abs(a - z[i]).max()) < 1e-9 and float((b - a).max()) < 1e-9
    torch = pytest.importorskip("torch")
    from exactmem.lm.torchrun import torch_logits

    state = {k: torch.from_numpy(v) for k, v in spec.tensors.items()}
    assert float(np.abs(torch_logits(spec, state, toks) - z).max()) < 1e-12
    ort = pytest.importorskip("onnxruntime")
    from exactmem.lm.onnx_graph import build_onnx

    sess = ort.InferenceSession(build_onnx(spec, "float64").SerializeToString(),
                                providers=["CPUExecutionProvider"])
    assert float(np.abs(sess.run(["logits"], {"tokens": toks})[0] - z).max()) < 1e-12


def test_a_certificate_carries_silu(silu_spec: object) -> None:
    from exactmem.checker.lm.lm_verify import check

    spec = silu_spec
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                 sequences=((0, 1, 2),), labels=((1, 2, 3),))
    cert = build_lm_certificate(spec, ds, [[]], True)
    assert cert["model"]["activation"] == "silu"
    bad, unusable, claim = check(cert, Path("."))
    assert not bad and claim is not None and claim.startswith("0 of 3 positions")
