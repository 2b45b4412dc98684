"""Code-length upper bounds and memorized bits (docs/memorized-bits.md): the checker's
logarithm and per-position bound are rigorous and tight, the producer's claims are upper
bounds the checker re-derives, and a claim below the checker's bound is rejected."""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_models import random_spec, redigest

from exactmem.checker.lm import lm_codelength
from exactmem.checker.verify import check_certificate
from exactmem.lm.certfile import build_lm_certificate, lm_info
from exactmem.lm.codelength import code_length_float, code_length_upper
from exactmem.lm.float64 import logits64
from exactmem.lm.positions import prove_positions
from exactmem.lm.tokens import next_token_dataset

Cert = dict[str, Any]
P = lm_codelength.P
mpmath.mp.prec = 300


@given(st.integers(1, 1 << 200), st.integers(1, 1 << 80))
@settings(max_examples=200, deadline=None)
def test_log2_bounds_enclose_the_logarithm_tightly(a: int, b: int) -> None:
    num, den = max(a, b), min(a, b)
    lo, hi = lm_codelength.log2_bounds(num, den)
    exact = mpmath.log(mpmath.mpf(num) / den, 2) * 2 ** P
    assert lo <= exact <= hi
    assert hi - lo <= 4


@given(st.lists(st.integers(-(1 << 134), 1 << 134), min_size=2, max_size=12),
       st.integers(0, 1 << 100), st.data())
@settings(max_examples=100, deadline=None)
def test_position_bound_is_above_the_code_length_of_every_point_of_the_ball(
        mids: list[int], rad: int, data: st.DataObject) -> None:
    y = data.draw(st.integers(0, len(mids) - 1))
    f = 128
    upper = lm_codelength.position_upper(mids, rad, y, f)
    # the worst point of the ball: the label's logit at its lowest, every other at its highest
    ls = [mpmath.mpf(m + (-rad if k == y else rad)) / 2 ** f for k, m in enumerate(mids)]
    worst = mpmath.log(sum(mpmath.exp(v - ls[y]) for v in ls), 2) * 2 ** P
    assert worst <= upper
    assert upper - worst <= 2 ** P * 1e-15 + 8 * len(mids) + 64 + 2 ** P * 4 * rad / 2 ** f


def test_the_reference_entropy_is_a_lower_bound() -> None:
    for v in (2, 3, 64, 50257):
        lo = lm_codelength.reference_lower(16, v)
        assert 0 <= 16 * mpmath.log(v, 2) * 2 ** P - lo <= 16 * 4


def test_the_producer_bound_is_above_the_float_code_length_and_close() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0, 3, (6, 40))
    labels = list(rng.integers(0, 40, 6))
    up = code_length_upper(x, x, labels)
    est = code_length_float(x, labels)
    exact = sum(mpmath.log(sum(mpmath.exp(mpmath.mpf(v) - mpmath.mpf(r[y])) for v in r), 2)
                for r, y in zip(x.tolist(), labels, strict=True))
    assert Fraction(str(mpmath.nstr(exact, 40))) < up
    assert abs(float(up) - est) < 1e-8
    wider = code_length_upper(x - 1e-3, x + 1e-3, labels)
    assert wider > up


@pytest.fixture(scope="module")
def cert() -> Cert:
    spec = random_spec(np.random.default_rng(11), "gelu_tanh", tied=True)
    toks = np.random.default_rng(12).integers(0, spec.vocab_size, size=(3, 7))
    ds = next_token_dataset(toks, spec.vocab_size)
    lengths: list[Fraction] = []
    bounds = prove_positions(spec, ds.sequences, ds.labels, producer="arb",
                             on_logits=lambda i, lo, hi: lengths.append(
                                 code_length_upper(lo, hi, ds.labels[i])))
    assert len(lengths) == 3
    floats = [code_length_float(x, y) for x, y in
              zip(logits64(spec, np.array(ds.sequences)), ds.labels, strict=True)]
    for c, f in zip(lengths, floats, strict=True):
        assert f <= c <= f + 1e-6
    return build_lm_certificate(spec, ds, [list(p) for p in bounds.proved], True,
                                code_lengths=lengths)


def test_the_checker_states_the_bits_below_the_uniform_code(cert: Cert) -> None:
    report = check_certificate(copy.deepcopy(cert), Path("."))
    assert report.verified, report.failures
    assert report.claim is not None
    line = report.claim.split("\nc claim: ")[1]
    assert line.startswith("code length at most ") and "uniform code over 11 tokens" in line
    assert "memorized by" not in line and "not memorized bits" in line
    bits = int(line.split("summed as Morris et al. 2025: at least ")[1].split()[0])
    coded = [Fraction(c) for c in cert["claims"]["code_length_bits"]]
    exact = sum(max(Fraction(0), 6 * Fraction(math.log2(11)) - c) for c in coded)
    assert bits <= exact < bits + 1 + 1e-9


def test_info_reports_certified_and_float_bits(cert: Cert) -> None:
    info = lm_info(cert)
    assert info["certified_memorized_bits"] <= info["float_memorized_bits"] + 1e-9
    assert info["certified_memorized_bits_unclipped"] <= info["float_memorized_bits_unclipped"]
    assert info["float_memorized_bits_unclipped"] - info[
        "certified_memorized_bits_unclipped"] < 1e-6
    assert info["certified_bits_per_param"] == info["certified_memorized_bits"] / info["params"]


def test_a_code_length_below_the_checkers_bound_is_rejected(cert: Cert) -> None:
    c = copy.deepcopy(cert)
    p, q = Fraction(c["claims"]["code_length_bits"][1]).as_integer_ratio()
    c["claims"]["code_length_bits"][1] = f"{p - (q >> 20)}/{q}"  # 2**-20 bits less
    report = check_certificate(redigest(c), Path("."))
    assert report.verified is False and not report.unusable
    assert any("sequence 1: claimed code length" in f for f in report.failures)
    assert report.claim is None


def test_a_changed_weight_is_rejected_even_with_a_new_digest(cert: Cert) -> None:
    c = copy.deepcopy(cert)
    vals = c["model"]["tensors"]["lnf.weight"]["values"]
    vals[0] = str(int(vals[0]) * 3)  # a larger gain: the logits move
    report = check_certificate(redigest(c), Path("."))
    assert report.verified is False and report.failures


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c["claims"]["code_length_bits"].pop(), "expected 3 bounds"),
    (lambda c: c["claims"]["code_length_bits"].__setitem__(0, 3), "code_length_bits[0]"),
    (lambda c: c["claims"]["code_length_bits"].__setitem__(0, "-1"), "a code length is >= 0"),
    (lambda c: c["dataset"]["data"]["labels"][2].__setitem__(0, 0)
     if c["dataset"]["data"]["labels"][2][0] else
     c["dataset"]["data"]["labels"][2].__setitem__(0, 1), "not labelled with its next"),
])
def test_crafted_code_lengths_are_unusable(cert: Cert, edit: Any, message: str) -> None:
    c = copy.deepcopy(cert)
    edit(c)
    if "labels" in message or "next" in message:
        from exactmem.checker.cert_dataset import dataset_object

        c["dataset"]["sha256"] = dataset_object(c["dataset"]["data"])[5]
    report = check_certificate(redigest(c), Path("."))
    assert report.unusable, report.failures
    assert any(message in f for f in report.failures), report.failures


def test_the_checkers_own_bounds_as_claims_are_verified(cert: Cert) -> None:
    from exactmem.api.self_check import checker_bound
    from exactmem.checker.lm.lm_verify import check

    derived: dict[int, int] = {}
    bad, unusable, _ = check(copy.deepcopy(cert), Path("."), derived=derived)
    assert not bad and not unusable and sorted(derived) == [0, 1, 2]
    c = copy.deepcopy(cert)
    for i, upper in derived.items():
        claim = checker_bound(upper)
        assert claim * 2 ** P >= upper
        c["claims"]["code_length_bits"][i] = f"{claim.numerator}/{claim.denominator}"
    assert check_certificate(redigest(c), Path(".")).verified
    lowered = Fraction(c["claims"]["code_length_bits"][0]) - Fraction(2, 1 << 32)
    c["claims"]["code_length_bits"][0] = f"{lowered.numerator}/{lowered.denominator}"
    assert not check_certificate(redigest(c), Path(".")).verified


def test_certify_model_claims_tight_code_lengths_with_the_default_producer(
        tmp_path: Path) -> None:
    """End to end with the default (fast) producer: the claimed code lengths are the
    checker's own bounds, so the certified bits sit within 1e-6 bits a sequence of the float
    estimate, and the certificate verifies."""
    pytest.importorskip("transformers")
    import torch
    from transformers import GPT2LMHeadModel

    from exactmem.api.lm import certify_lm
    from exactmem.checker.verify import check_file
    from exactmem.lm.certfile import lm_info
    from exactmem.lm.checkpoints.random_models import random_gpt2
    from exactmem.model.dataset import save_dataset

    random_gpt2(tmp_path / "m", seed=3)
    model = GPT2LMHeadModel.from_pretrained(tmp_path / "m").double().eval()
    toks = np.random.default_rng(5).integers(0, 64, size=(6, 12))
    with torch.no_grad():  # greedy continuations, half of each sequence: some positions hold
        for t in range(6, 12):
            toks[:, t] = model(torch.tensor(toks[:, :t])).logits[:, -1].argmax(-1).numpy()
    save_dataset(next_token_dataset(toks, 64), tmp_path / "d.json")
    res = certify_lm(tmp_path / "m", tmp_path / "d.json", tmp_path / "c.json", partial=True)
    assert res.written
    report = check_file(str(tmp_path / "c.json"))
    assert report.verdict == "s VERIFIED", report.failures
    info = lm_info(json.loads((tmp_path / "c.json").read_text()))
    gap = info["float_memorized_bits_unclipped"] - info["certified_memorized_bits_unclipped"]
    assert 0 <= gap < 6e-6
