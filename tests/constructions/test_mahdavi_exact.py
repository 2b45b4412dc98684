"""Mahdavi et al. as the theorem states it: the checker proves from rigorous softmax bounds
that the feature matrix is non-singular, so an exact real readout exists; a singular
system, a wrong preconditioner or bounds too loose are rejected."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from exactmem.certificate import build_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.constructions import get
from exactmem.datasets.draw_attention import generate_for
from exactmem.model.interval_verdict import evaluate_certified


def _cert(N: int | None = None) -> dict[str, Any]:  # noqa: N803
    kw: dict[str, Any] = {"N": N} if N else {}
    ds = generate_for("mahdavi2024-mha", seed=2, heads=2, head_dim=3, n=3, dim=5, **kw)
    con = get("mahdavi2024-mha")
    result = con.build(ds, {**con.defaults(), "heads": 2, "head_dim": 3, "readout": "exact"})
    return build_certificate(ds, result, con.name, evaluate_certified(result.spec, ds,
                                                                     result.hints))


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return _cert()


def _redigest(c: dict[str, Any]) -> dict[str, Any]:
    c["digest"] = digest_of(c)
    return c


def test_the_exact_readout_claim_verifies_and_is_stated(cert: dict[str, Any]) -> None:
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    assert report.claim is not None and report.claim.startswith("an exact real readout exists")
    # beyond Theorem 1's worst-case count H(min(n, d_h) - 1) + 1 = 5: up to H d = 10 here
    big = _cert(N=10)
    assert check_certificate(big).verified
    assert big["construction"]["params"]["theorem_capacity"] == 5


def test_a_zero_preconditioner_is_rejected(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    pre = c["hints"]["softmax"]["readout"]["preconditioner"]
    c["hints"]["softmax"]["readout"]["preconditioner"] = [["0" for _ in r] for r in pre]
    report = check_certificate(_redigest(c))
    assert not report.verified and not report.unusable
    assert any("not proved to admit an exact readout" in f for f in report.failures)


def test_bounds_too_loose_are_rejected(cert: dict[str, Any]) -> None:
    from fractions import Fraction

    c = copy.deepcopy(cert)
    pre = c["hints"]["softmax"]["readout"]["preconditioner"]
    # 1.95 C: |I - 1.95 C A| ~ 0.95 < 1, provable with tight bounds only
    scaled = [[str(Fraction(x) * Fraction(39, 20)) for x in r] for r in pre]
    c["hints"]["softmax"]["readout"]["preconditioner"] = scaled
    assert check_certificate(_redigest(c)).verified
    c["hints"]["softmax"]["precision"] = 2
    report = check_certificate(_redigest(c))
    assert not report.verified and not report.unusable
    assert any("not proved to admit an exact readout at precision 2" in f
               for f in report.failures)


def test_a_singular_system_is_rejected(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    att = next(la for la in c["network"]["layers"] if la["type"] == "attention")
    att["heads"][0]["value"] = [["0" for _ in r] for r in att["heads"][0]["value"]]
    from exactmem.certificate import spec_from_certificate
    from exactmem.model.sizes import sizes

    c["sizes"] = sizes(spec_from_certificate(c)).as_dict()
    report = check_certificate(_redigest(c))
    assert not report.verified and not report.unusable


def test_a_malformed_readout_hint_is_unusable(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    c["hints"]["softmax"]["readout"]["columns"] = c["hints"]["softmax"]["readout"]["columns"][:-1]
    report = check_certificate(_redigest(c))
    assert report.unusable
