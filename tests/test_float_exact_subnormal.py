"""Float-exact claims hold where hardware flushes subnormals (issue 26, item 1).

The crafted certificates: 64 one-token sequences, each token embedded as the one-hot vector
of its label, then linear maps whose weights are tiny powers of two, argmax readout.  The
exact network memorizes; a CPU or GPU that flushes subnormals to zero (AVX512_BF16 dot
products, FTZ/DAZ modes, GPUs) computes all-zero outputs and an argmax tie.  The old rule
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

from exactmem.arith import ScaledMatrix
from exactmem.certificate import build_certificate, claim_float_exact, write_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.constructions.base import BuildResult
from exactmem.model.evaluate import evaluate
from exactmem.model.generate import generate
from exactmem.model.spec import Affine, Embedding, Linear, NetworkSpec, Readout

CLASSES = 4


def tiny_network(scales: list[Fraction], seed: int = 7) -> dict[str, Any]:
    """The crafted certificate: one-hot label embedding, then ``x -> s x`` per scale."""
    ds = generate("next-token", N=64, n=1, vocab=64, classes=CLASSES, seed=seed)
    table = [[0] * 64 for _ in range(CLASSES)]
    for seq, y in zip(ds.sequences, ds.labels, strict=True):
        table[y][seq[0]] = 1
    eye = [[int(i == j) for j in range(CLASSES)] for i in range(CLASSES)]
    layers = [Embedding(ScaledMatrix.from_rows(table))]
    layers += [Linear(Affine(ScaledMatrix.from_rows([[s * x for x in r] for r in eye])))
               for s in scales]
    spec = NetworkSpec(input_kind="token-ids", input_dim=64, seq_len=1, layers=tuple(layers),
                       readout=Readout("argmax", "last"))
    ev = evaluate(spec, ds)
    assert ev.memorized
    return build_certificate(ds, BuildResult(spec, {}), "lookup", ev)


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
