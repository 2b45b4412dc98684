"""RMSNorm in the language-model path (docs/trained-models.md, "RMSNorm"): the arb, float64
ball and norm-ball producers and the checker enclose the exact value (mpmath at 400 bits) at
points of their input balls; a torch encoder stack whose norms are ``nn.RMSNorm`` is imported
(eps rule, one kind of norm), certified and checked end to end; tampering is caught."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import flint
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_models import checker_norm_case, random_spec, redigest

from exactmem.checker.cert_dataset import canonical
from exactmem.checker.lm import lm_bounds
from exactmem.checker.lm import lm_forward as L
from exactmem.checker.verify import check_certificate
from exactmem.cli import main
from exactmem.errors import SpecError
from exactmem.lm import arb as A
from exactmem.lm import ball_steps as F
from exactmem.lm import balls as I
from exactmem.lm.certfile import lm_info
from exactmem.lm.checkpoints.random_models import random_encoder, self_labelled_encoder
from exactmem.lm.checkpoints.torch_encoder import (
    encoder_logits,
    load_torch_encoder,
    reference_module,
    save_encoder,
)
from exactmem.lm.float64 import logits64
from exactmem.lm.normballs import NormWeights, logit_bounds
from exactmem.model.dataset import save_dataset

SEQS = 32  # sequences of 16 tokens per stack (the 200 are measured in the docs)


def run(*args: object) -> int:
    return main([str(a) for a in args])


def mp(x: float | int) -> mpmath.mpf:
    return mpmath.mpf(x)


def rms_exact(xs: list[mpmath.mpf], g: np.ndarray, b: np.ndarray, eps: float
              ) -> list[mpmath.mpf]:
    """``x / sqrt(mean(x^2) + eps) * g + b`` in mpmath (the caller sets the precision)."""
    s = 1 / mpmath.sqrt(sum(v * v for v in xs) / len(xs) + mp(eps))
    return [v * s * mp(gi) + mp(bi) for v, gi, bi in zip(xs, g.tolist(), b.tolist(),
                                                         strict=True)]


def _rows(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints of ordinary size, and a row near 0 whose radii exceed some midpoints."""
    m = np.concatenate([rng.normal(0, 2, (3, 16)), rng.normal(0, 1e-3, (1, 16))])
    r = np.abs(np.concatenate([rng.normal(0, 1e-6, (3, 16)), rng.normal(0, 1e-3, (1, 16))]))
    return m, r


def test_the_float64_ball_rmsnorm_encloses_every_point() -> None:
    rng = np.random.default_rng(3)
    m, r = _rows(rng)
    g, b = rng.normal(1, 0.3, 16), rng.normal(0, 0.3, 16)
    (ym, yr), mslo = F.rmsnorm_var((m, r), g, b, 1e-5)
    lo, hi = I.lohi((ym, yr))
    with mpmath.workprec(400):
        for _ in range(4):
            pt = m + r * rng.uniform(-0.99, 0.99, m.shape)
            for row in range(len(m)):
                xs = [mp(v) for v in pt[row].tolist()]
                assert mp(mslo[row, 0]) <= sum(v * v for v in xs) / 16
                for i, y in enumerate(rms_exact(xs, g, b, 1e-5)):
                    assert mp(lo[row, i]) <= y <= mp(hi[row, i])
    assert float(yr[:3].max()) < 1e-4  # tight where the input is


def _exact(x: flint.arb) -> mpmath.mpf:
    man, exp = x.man_exp()
    return mp(int(man)) * mp(2) ** int(exp)


def test_the_arb_rmsnorm_encloses_every_point() -> None:
    rng = np.random.default_rng(4)
    m, r = _rows(rng)
    g, b = rng.normal(1, 0.3, 16), rng.normal(0, 0.3, 16)
    old = flint.ctx.prec
    flint.ctx.prec = A.PREC
    try:
        rows = [[flint.arb(mi, ri) for mi, ri in zip(mr, rr, strict=True)]
                for mr, rr in zip(m.tolist(), r.tolist(), strict=True)]
        out = A._rmsnorm(rows, g.tolist(), b.tolist(), flint.arb(1e-5))
        with mpmath.workprec(400):
            for _ in range(4):
                pt = m + r * rng.uniform(-0.99, 0.99, m.shape)
                for row in range(len(m)):
                    ys = rms_exact([mp(v) for v in pt[row].tolist()], g, b, 1e-5)
                    for ball, y in zip(out[row], ys, strict=True):
                        assert _exact(ball.lower()) <= y <= _exact(ball.upper())
    finally:
        flint.ctx.prec = old


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(3 << 20), 3 << 20), min_size=2, max_size=12),
       st.integers(0, 1 << 100), st.randoms(use_true_random=False))
def test_the_checker_s_rmsnorm_ball_contains_every_point(xs: list[int], r: int, rnd) -> None:  # type: ignore[no-untyped-def]
    d = len(xs)
    m, g, b, params, eps, epsb = checker_norm_case(xs, rnd)
    mids, rad = L.rmsnorm(params, m, r, epsb)
    with mpmath.workprec(400):
        one = mp(2) ** L.F
        for _ in range(3):
            x = [mp(v + rnd.randint(-r, r)) / one for v in m]
            s = 1 / mpmath.sqrt(sum(v * v for v in x) / d + mp(eps.numerator) / eps.denominator)
            y = [v * s * gi / 2 ** 8 + mp(bi) / 2 ** 9 for v, gi, bi in zip(x, g, b, strict=True)]
            assert all(abs(v * one - mi) <= rad for mi, v in zip(mids, y, strict=True))


def test_the_checker_refuses_a_zero_input_with_eps_0() -> None:
    params = L.ln_params(([[1, 1, 1]], 0), ([[0, 0, 0]], 0))
    with pytest.raises(lm_bounds.Degenerate, match="RMSNorm"):
        L.rmsnorm(params, [0, 0, 0], 0, (0, 0))


def rms_spec(seed: int) -> Any:
    return dataclasses.replace(random_spec(np.random.default_rng(seed), "gelu_tanh", False),
                               norm="rmsnorm")


@pytest.mark.parametrize("scale", [2.0, 3e-3])
def test_the_norm_ball_rmsnorm_holds_every_point_of_the_ball(scale: float) -> None:
    """Points at distance ``rho`` from the midpoint (``|m|`` well above ``rho``, and close to
    it): the exact image lies within the output radius of the output midpoint (2-norm)."""
    spec = rms_spec(5)
    w = NormWeights(spec)
    rng = np.random.default_rng(6)
    m = rng.normal(0, scale, (2, 3, 8))
    rho = np.full((2, 3), 1e-3)
    ym, yr = w.ln((m, rho), "h0.ln2")
    g, b = spec.get("h0.ln2.weight"), spec.get("h0.ln2.bias")
    with mpmath.workprec(400):
        for _ in range(5):
            u = rng.normal(size=m.shape)
            pt = m + u / np.linalg.norm(u, axis=-1, keepdims=True) * (rho * 0.99)[..., None]
            for j, k in np.ndindex(2, 3):
                ys = rms_exact([mp(v) for v in pt[j, k].tolist()], g, b, spec.layer_norm_eps)
                dist = mpmath.sqrt(sum((y - mp(c)) ** 2
                                       for y, c in zip(ys, ym[j, k].tolist(), strict=True)))
                assert dist <= mp(yr[j, k])


def test_the_norm_ball_rmsnorm_bounds_sigma_where_the_ball_nears_0() -> None:
    """Unit gains, ``|m| = 1.2 rho``: the point of the ball where the direction turns most
    (tangent from the origin, angle ``asin(rho/|m|)``) moves the output by ``0.94 sqrt(d)``;
    a bound taking ``sigma`` at ``|m|`` instead of ``|m| - rho`` would allow only 0.83."""
    base = rms_spec(5)
    tensors = {**base.tensors, "h0.ln2.weight": np.ones(8), "h0.ln2.bias": np.zeros(8)}
    w = NormWeights(dataclasses.replace(base, tensors=tensors))
    rho = 1.0  # |m|^2 / d far above eps
    mhat, vhat = np.eye(8)[0], np.eye(8)[1]
    m = 1.2 * rho * mhat
    ym, yr = w.ln((m[None, None], np.array([[rho]])), "h0.ln2")
    sin = 0.99 * rho / 1.2 / rho
    cos = np.sqrt(1 - sin * sin)
    pt = 1.2 * rho * cos * (cos * mhat + sin * vhat)  # |pt - m| = 0.99 rho
    assert np.linalg.norm(pt - m) <= rho
    with mpmath.workprec(400):
        ys = rms_exact([mp(v) for v in pt.tolist()], np.ones(8), np.zeros(8),
                       base.layer_norm_eps)
        dist = mpmath.sqrt(sum((y - mp(c)) ** 2 for y, c in zip(ys, ym[0, 0].tolist(),
                                                                strict=True)))
    assert 0.9 * np.sqrt(8) < dist <= mp(yr[0, 0])


def test_the_fast_logit_bounds_hold_the_rmsnorm_float_logits() -> None:
    spec = rms_spec(7)
    toks = np.random.default_rng(8).integers(0, spec.vocab_size, size=(3, 8))
    mid, rad = logit_bounds(NormWeights(spec), toks)
    floats = logits64(spec, toks)
    assert (np.abs(floats - mid) <= rad + 1e-9).all() and rad.max() < 1e-3
    ln = logits64(dataclasses.replace(spec, norm="layernorm"), toks)
    assert np.abs(ln - mid).max() > 1e-2  # the norm kind is read, not ignored


def test_the_spec_names_its_norm_kind() -> None:
    with pytest.raises(SpecError, match="norm: expected one of layernorm, rmsnorm"):
        dataclasses.replace(rms_spec(1), norm="batchnorm")


@pytest.fixture(scope="module")
def enc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per ``norm_first``: a random stack with nn.RMSNorm(eps=None) norms ``m_NF.pt`` (2
    layers, d = 32, 2 heads, vocab 64, context 16), :data:`SEQS` self-labelled sequences of 16
    tokens ``d_NF.json``, the certificate ``c_NF.json``; a LayerNorm stack ``m_ln.pt``."""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("rms")
    for nf in (True, False):
        path = random_encoder(folder / f"m_{nf}.pt", seed=7, norm_first=nf, norm="rmsnorm",
                              eps=None)
        save_dataset(self_labelled_encoder(path, SEQS, 16, seed=7), folder / f"d_{nf}.json")
    path = random_encoder(folder / "m_ln.pt", seed=7)
    save_dataset(self_labelled_encoder(path, 4, 16, seed=7), folder / "d_ln.json")
    return folder


@pytest.mark.parametrize("nf", [True, False])
def test_an_rmsnorm_stack_is_certified_and_checked_with_the_same_count(
        enc: Path, nf: bool, capsys: pytest.CaptureFixture[str]) -> None:
    cert = enc / f"c_{nf}.json"
    assert run("certify-model", enc / f"m_{nf}.pt", enc / f"d_{nf}.json", "-o", cert,
               "--partial") == 0
    captured = capsys.readouterr()
    assert ("agree with the reference module built from the saved config (the "
            "nn.TransformerEncoderLayer stack's forward pass") in captured.err
    made = re.search(r"certified (\d+) of (\d+) positions", captured.out)
    total = 16 * SEQS
    assert made is not None and int(made[2]) == total and int(made[1]) >= 0.98 * total
    assert run("check", cert, "-q") == 0
    assert f"c claim: {made[1]} of {total} positions" in capsys.readouterr().out
    model = json.loads(cert.read_text())["model"]
    assert model["norm"] == "rmsnorm" and model["layer_norm_eps"] == "1/8388608"
    assert lm_info(json.loads(cert.read_text()))["norm"] == "rmsnorm"
    assert not any(k.endswith(("ln1.bias", "ln2.bias", "lnf.bias")) for k in model["tensors"])


def _cert(enc: Path) -> dict[str, Any]:
    path = enc / "c_True.json"
    if not path.exists():
        assert run("certify-model", enc / "m_True.pt", enc / "d_True.json", "-o", path,
                   "--partial", "-q") == 0
    return json.loads(path.read_text())


def test_a_changed_norm_gain_is_rejected(enc: Path) -> None:
    cert = _cert(enc)
    gain = cert["model"]["tensors"]["h1.ln2.weight"]  # + 64 on one coordinate
    gain["values"][5] = str(int(gain["values"][5]) + (64 << gain["scale"]))
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and report.failures
    assert all(f.startswith("sequence ") for f in report.failures)


def test_a_changed_label_is_no_longer_certified(enc: Path) -> None:
    cert = _cert(enc)
    positions = [list(p) for p in cert["claims"]["positions"]]
    assert 3 in positions[0]
    data = cert["dataset"]["data"]
    data["labels"][0][3] = (data["labels"][0][3] + 1) % 64
    cert["dataset"]["sha256"] = hashlib.sha256(canonical(data).encode()).hexdigest()
    report = check_certificate(redigest(cert), Path("."))
    assert [f.split(":")[0] for f in report.failures] == ["sequence 0, position 3"]
    bad = enc / "relabelled.json"
    bad.write_text(canonical(data) + "\n")
    assert run("certify-model", enc / "m_True.pt", bad, "-o", enc / "r.json", "--partial",
               "-q") == 0
    again = json.loads((enc / "r.json").read_text())["claims"]["positions"]
    assert 3 not in again[0] and again[1:] == positions[1:]


def test_the_checker_reads_the_norm_kind_strictly(enc: Path) -> None:
    """RMSNorm read as LayerNorm is another function: rejected; an unknown kind is one
    unusable line; a certificate without the field (older ones) is a LayerNorm model."""
    cert = _cert(enc)
    cert["model"]["norm"] = "layernorm"
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and report.failures[0].startswith("sequence ")
    cert["model"]["norm"] = "batchnorm"
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and len(report.failures) == 1
    assert report.failures[0].startswith("model.norm: expected one of")
    assert run("certify-model", enc / "m_ln.pt", enc / "d_ln.json", "-o", enc / "ln.json",
               "--partial", "-q") == 0
    old = json.loads((enc / "ln.json").read_text())
    assert old["model"].pop("norm") == "layernorm"
    assert check_certificate(redigest(old), Path(".")).verified


@pytest.mark.parametrize("nf", [True, False])
def test_the_spec_computes_torch_s_function_with_the_eps_torch_uses(enc: Path,
                                                                    nf: bool) -> None:
    """eps=None: float32 weights run with torch.finfo(float32).eps, float64 weights with
    float64's; the cross-check's float64 forward uses the stored one."""
    import torch

    toks = np.random.default_rng(1).integers(0, 64, size=(3, 16))
    spec = load_torch_encoder(enc / f"m_{nf}.pt")
    assert spec.norm == "rmsnorm" and spec.layer_norm_eps == 2.0 ** -23
    assert np.abs(encoder_logits(enc / f"m_{nf}.pt", toks) - logits64(spec, toks)).max() < 1e-9
    ckpt = torch.load(str(enc / f"m_{nf}.pt"), weights_only=True)
    ckpt["state_dict"] = {k: v.double() for k, v in ckpt["state_dict"].items()}
    torch.save(ckpt, str(enc / "double.pt"))
    spec64 = load_torch_encoder(enc / "double.pt")
    assert spec64.layer_norm_eps == 2.0 ** -52
    model = reference_module(ckpt["config"]).double().eval()  # eps=None, as trained
    model.load_state_dict(ckpt["state_dict"])
    with torch.no_grad():
        own = model(torch.as_tensor(toks)).numpy()
    assert np.abs(own - logits64(spec64, toks)).max() < 1e-9


def test_save_encoder_reads_the_modules_and_names_a_mixed_norm(enc: Path) -> None:
    import torch

    ckpt = torch.load(str(enc / "m_True.pt"), weights_only=True)
    model = reference_module(ckpt["config"])
    path = save_encoder(model, ckpt["config"], enc / "saved.pt")
    assert load_torch_encoder(path).norm == "rmsnorm"
    model.layers[1].norm2 = torch.nn.LayerNorm(32)
    with pytest.raises(SpecError, match="module layers.1.norm2 is LayerNorm but "
                                        "layers.0.norm1 is RMSNorm"):
        save_encoder(model, ckpt["config"], enc / "mixed.pt")


@pytest.mark.parametrize("change, message", [
    (lambda c: c["state_dict"].update({"layers.0.norm1.bias": c["state_dict"]["pos.weight"][0]}),
     "layers.0.norm1 has a bias, so it is not an nn.RMSNorm"),
    (lambda c: c["config"].update(layer_norm_eps=0.0), "config.layer_norm_eps is 0"),
    (lambda c: c["config"].update(norm="batchnorm"), "config.norm"),
])
def test_bad_rmsnorm_checkpoints_are_one_line_exit_2(enc: Path, tmp_path: Path, change: Any,
                                                     message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    ckpt = torch.load(str(enc / "m_True.pt"), weights_only=True)
    change(ckpt)
    torch.save(ckpt, str(tmp_path / "bad.pt"))
    assert run("certify-model", tmp_path / "bad.pt", enc / "d_True.json", "-o",
               tmp_path / "c.json", "--format", "torch-encoder", "--partial", "-q") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "c.json").exists()
