"""The checker's rigorous softmax path: certificates of softmax networks verify, and a
tampered weight, hint or label is rejected."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import exp_bounds, softmax_enclosure
from exactmem.certificate import build_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.checker import softmax_bounds as checker_softmax
from exactmem.constructions import get
from exactmem.datasets.draw_attention import generate_for
from exactmem.model.dataset import Dataset
from exactmem.model.interval_verdict import evaluate_certified


def certificate_for(ds: Dataset, name: str, options: dict[str, Any]) -> dict[str, Any]:
    result = get(name).build(ds, {**get(name).defaults(), **options})
    evaluation = evaluate_certified(result.spec, ds, result.hints)
    assert evaluation.memorized, evaluation.failures[:3]
    return build_certificate(ds, result, name, evaluation)


def _resign(cert: dict[str, Any]) -> dict[str, Any]:
    """Recompute the digest, so that only the semantic check can catch the tampering."""
    cert["digest"] = digest_of(cert)
    return cert


@pytest.fixture(scope="module")
def dana_cert() -> dict[str, Any]:
    ds = generate_for("dana2024-aot", seed=3, heads=2, head_dim=2, dim=2, vocab=40)
    return certificate_for(ds, "dana2024-aot", {"heads": 2, "head_dim": 2, "dim": 2})


@pytest.fixture(scope="module")
def mahdavi_cert() -> dict[str, Any]:
    ds = generate_for("mahdavi2024-mha", seed=3, heads=2, head_dim=3, n=3, dim=5)
    return certificate_for(ds, "mahdavi2024-mha", {"heads": 2, "head_dim": 3})


def test_both_certificates_verify(dana_cert: dict[str, Any], mahdavi_cert: dict[str, Any]) -> None:
    for cert in (dana_cert, mahdavi_cert):
        report = check_certificate(cert)
        assert report.verified, report.failures


@pytest.mark.parametrize("which", ["dana", "mahdavi"])
def test_tampered_weight_rejected(which: str, dana_cert: dict[str, Any],
                                  mahdavi_cert: dict[str, Any]) -> None:
    cert = copy.deepcopy(dana_cert if which == "dana" else mahdavi_cert)
    layers = cert["network"]["layers"]
    att = next(la for la in layers if la["type"] == "attention")
    if which == "dana":
        row = att["heads"][0]["output"][0]
        row[0] = str(Fraction(row[0]) + 5)
    else:  # the readout weights of Mahdavi's network live in the value matrices
        row = att["heads"][0]["value"][0]
        row[0] = str(Fraction(row[0]) + 7)
    report = check_certificate(_resign(cert))
    assert not report.verified
    assert any("readout" in f or "sizes" in f for f in report.failures)


@pytest.mark.parametrize("which", ["dana", "mahdavi"])
def test_tampered_hint_rejected(which: str, dana_cert: dict[str, Any],
                                mahdavi_cert: dict[str, Any]) -> None:
    base = dana_cert if which == "dana" else mahdavi_cert
    if which == "dana":  # 40 classes on a circle: margins too small for 2-bit bounds
        cert = copy.deepcopy(base)
        cert["hints"]["softmax"]["precision"] = 2
        assert not check_certificate(_resign(cert)).verified
    for bad in (0, "64", 10 ** 9):
        cert = copy.deepcopy(base)
        cert["hints"]["softmax"]["precision"] = bad
        report = check_certificate(_resign(cert))
        assert not report.verified and report.unusable
    cert = copy.deepcopy(base)
    del cert["hints"]["softmax"]
    report = check_certificate(_resign(cert))
    assert not report.verified and report.unusable


def test_tampered_epsilon_and_label_rejected(mahdavi_cert: dict[str, Any],
                                             dana_cert: dict[str, Any]) -> None:
    cert = copy.deepcopy(mahdavi_cert)
    cert["hints"]["softmax"]["epsilon"] = "1/1000000000000000000000000000000000000000000000"
    assert not check_certificate(_resign(cert)).verified
    for base in (mahdavi_cert, dana_cert):
        cert = copy.deepcopy(base)
        labels = cert["dataset"]["data"]["labels"]
        labels[0] = labels[0] + 1
        cert["claims"]["outputs"][0] = [str(labels[0])]
        from exactmem.model.dataset import dataset_from_json
        cert["dataset"]["sha256"] = dataset_from_json(cert["dataset"]["data"]).sha256()
        report = check_certificate(_resign(cert))
        assert not report.verified
        assert any("sequence 0" in f for f in report.failures)


@settings(max_examples=60, deadline=None)
@given(st.fractions(min_value=-40, max_value=40, max_denominator=300),
       st.integers(min_value=8, max_value=160))
def test_checker_exp_agrees_with_producer(q: Fraction, bits: int) -> None:
    lo, hi = checker_softmax.exp_bounds(q, bits)
    plo, phi = exp_bounds(q, bits)
    assert lo <= hi and plo <= phi
    assert max(lo, plo) <= min(hi, phi)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.fractions(min_value=-20, max_value=20, max_denominator=40), min_size=1,
                max_size=5), st.integers(min_value=8, max_value=96))
def test_checker_softmax_agrees_with_producer(s: list[Fraction], bits: int) -> None:
    row = checker_softmax.softmax_row(s, s, bits)
    enc = softmax_enclosure(s, precision=bits)
    assert sum(lo for lo, _ in row) <= 1 <= sum(hi for _, hi in row)
    for (lo, hi), plo, phi in zip(row, enc.lower, enc.upper, strict=True):
        assert max(lo, plo) <= min(hi, phi)
