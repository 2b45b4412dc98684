"""Float-exact claims hold where hardware flushes subnormals.

The crafted certificates (``tiny_network``, tests/fuzzing_float.py): 64 one-token sequences,
each token embedded as the one-hot vector of its label, then linear maps whose weights are
tiny powers of two, argmax readout.  The exact network memorizes; a CPU or GPU that flushes
subnormals to zero (AVX512_BF16 dot products, FTZ/DAZ modes, GPUs) computes all-zero outputs
and an argmax tie.  The old rule
admitted the subnormal grid and verified these claims; the checker must now refuse them,
naming the subnormal rule, while the producer never claims them.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from fuzzing_float import tiny_network

from exactmem.certificate import claim_float_exact, write_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate


def claiming(cert: dict[str, Any], formats: list[str]) -> dict[str, Any]:
    c = copy.deepcopy(cert)
    c["claims"] = {**c["claims"], "float_exact": formats}
    c["digest"] = digest_of(c)
    return c


# (format, scales, what is subnormal): a weight itself, or only the products of normal weights
CASES = [
    ("bfloat16", [Fraction(1, 2 ** 130)], "value"),
    ("bfloat16", [Fraction(1, 2 ** 65), Fraction(1, 2 ** 65)], "grid"),
    ("float16", [Fraction(1, 2 ** 20)], "value"),
    ("float16", [Fraction(1, 2 ** 8), Fraction(1, 2 ** 8)], "grid"),
]


@pytest.mark.parametrize(("fmt", "scales", "where"), CASES)
def test_a_subnormal_float_claim_is_rejected_naming_the_rule(
        fmt: str, scales: list[Fraction], where: str) -> None:
    cert = claiming(tiny_network(scales), [fmt])
    report = check_certificate(cert)
    assert not report.verified and not report.unusable
    assert report.failures and all(f"not exact in {fmt}" in f for f in report.failures)
    assert any("below the smallest normal" in f and "subnormal" in f for f in report.failures)
    # the exact claim alone still verifies: only the float claim was false
    plain = copy.deepcopy(cert)
    del plain["claims"]["float_exact"]
    plain["digest"] = digest_of(plain)
    assert check_certificate(plain).verified


@pytest.mark.parametrize(("fmt", "scales", "where"), CASES)
def test_the_producer_never_claims_a_subnormal_format(
        fmt: str, scales: list[Fraction], where: str) -> None:
    cert = tiny_network(scales)
    held = claim_float_exact(cert)
    assert fmt not in held and "float64" in held
    assert check_certificate(cert).verified


def test_the_same_networks_scaled_into_the_normal_range_verify() -> None:
    # the rule is about the range, not the shape: 2^-126 (bfloat16 and float32) and
    # 2^-14 (float16) are normal
    for fmt, s in (("bfloat16", Fraction(1, 2 ** 126)), ("float16", Fraction(1, 2 ** 14))):
        cert = claiming(tiny_network([s]), [fmt])
        report = check_certificate(cert)
        assert report.verified, report.failures[:2]
        assert f"float-exact in {fmt}" in (report.claim or "")


def test_check_prints_rejected_and_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "bf16_subnormal.json"
    write_certificate(claiming(tiny_network([Fraction(1, 2 ** 130)]), ["bfloat16"]), path)
    out = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stdout.strip().splitlines()[-1] == "s REJECTED"
    assert "subnormal" in out.stderr and "Traceback" not in out.stderr
