"""The float-exact claim: the checker's rule decides representability exactly like IEEE
casts (normal floats only: subnormals are refused), a float32-exact network runs in float32
with every label right, and a claim broken by a weight that is no float32 or by a sum past
2^24 units is rejected."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.certificate import build_certificate, claim_float_exact, spec_from_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.checker.floatexact import FORMATS, NotExact, _ieee_value
from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.model.evaluate import evaluate


@pytest.fixture(scope="module")
def lookup24() -> dict[str, Any]:
    ds = generate("next-token", N=60, n=6, vocab=10, classes=4, seed=5)
    con = get("lookup")
    result = con.build(ds, {**con.defaults(), "max_bits": 24})
    return build_certificate(ds, result, "lookup", evaluate(result.spec, ds))


def _is_ieee_value(value: Fraction, fmt: str) -> bool:
    try:
        _ieee_value(value.numerator, value.denominator, FORMATS[fmt], "x")
    except NotExact:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(m=st.integers(-(2 ** 30), 2 ** 30), e=st.integers(-160, 140))
def test_representability_agrees_with_ieee_casts(m: int, e: int) -> None:
    value = Fraction(m) * Fraction(2) ** e
    with np.errstate(over="ignore", under="ignore"):
        for fmt, dtype in (("float32", np.float32), ("float16", np.float16)):
            cast = dtype(float(value)) if abs(value) < 2 ** 1000 else dtype(np.inf)
            tiny = Fraction(float(np.finfo(dtype).tiny))  # the smallest normal
            exact = bool(np.isfinite(cast)) and Fraction(float(cast)) == value \
                and (value == 0 or abs(value) >= tiny)  # subnormals are refused
            assert _is_ieee_value(value, fmt) == exact, (value, fmt)


def test_the_float32_claim_is_found_verified_and_stated(lookup24: dict[str, Any]) -> None:
    cert = copy.deepcopy(lookup24)
    held = claim_float_exact(cert)
    assert "float32" in held and "bfloat16" not in held
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    assert "float-exact in float32" in (report.claim or "")


def test_a_false_float_claim_is_rejected_naming_the_operation(lookup24: dict[str, Any]) -> None:
    cert = copy.deepcopy(lookup24)
    cert["claims"]["float_exact"] = ["bfloat16"]
    cert["digest"] = digest_of(cert)
    report = check_certificate(cert)
    assert not report.verified and not report.unusable
    assert any("not exact in bfloat16" in f for f in report.failures)


def _last_map(cert: dict[str, Any]) -> dict[str, Any]:
    la = cert["network"]["layers"][-1]
    return la["maps"][-1] if la["type"] == "feedforward" else la


def test_tampering_with_the_float_claim_is_rejected(lookup24: dict[str, Any]) -> None:
    base = copy.deepcopy(lookup24)
    claim_float_exact(base, ["float32"])
    # a weight that is no float32 (25 significant bits), the labels still right
    cert = copy.deepcopy(base)
    row = _last_map(cert)["weight"][0]
    j = next(k for k, x in enumerate(row) if x != "0")
    row[j] = str(Fraction(row[j]) * (1 + Fraction(1, 2 ** 24)))
    from exactmem.model.sizes import sizes

    cert["sizes"] = sizes(spec_from_certificate(cert)).as_dict()
    cert["digest"] = digest_of(cert)
    report = check_certificate(cert)
    assert any("float_exact" in f for f in report.failures), report.failures[:3]
    # a hidden map scaled by 2^20 and the next by 2^-20: relu(2^20 z) = 2^20 relu(z), so
    # the exact outputs are unchanged and every weight is still a float32, but the hidden
    # dot products pass 2^24 units of their grid
    cert = copy.deepcopy(base)
    block = next(la for la in cert["network"]["layers"]
                 if la["type"] == "feedforward" and len(la["maps"]) >= 2)
    first, second = block["maps"][0], block["maps"][1]
    first["weight"] = [[str(Fraction(x) * 2 ** 20) for x in r] for r in first["weight"]]
    if first["bias"] is not None:
        first["bias"] = [str(Fraction(x) * 2 ** 20) for x in first["bias"]]
    second["weight"] = [[str(Fraction(x) / 2 ** 20) for x in r] for r in second["weight"]]
    cert["sizes"] = sizes(spec_from_certificate(cert)).as_dict()
    cert["digest"] = digest_of(cert)
    report = check_certificate(cert)
    assert report.failures and all("float_exact" in f for f in report.failures), \
        report.failures[:3]
    assert any("exceeds 2^P" in f for f in report.failures)


def test_the_float32_mirror_gets_every_label(lookup24: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    from exactmem.certificate import dataset_from_certificate
    from exactmem.exporters.torch import to_torch

    cert = copy.deepcopy(lookup24)
    assert "float32" in claim_float_exact(cert, ["float32"])
    ds = dataset_from_certificate(cert)
    net = to_torch(spec_from_certificate(cert), torch.float32)
    with torch.no_grad():
        out = net(torch.tensor(ds.sequences, dtype=torch.int64))[:, -1, :]
    exact = evaluate(spec_from_certificate(cert), ds).predictions
    got = out.argmax(dim=-1).tolist() if out.shape[-1] > 1 else out[:, 0].tolist()
    want = [int(row[0]) for row in exact]
    assert got == want == list(ds.labels)
