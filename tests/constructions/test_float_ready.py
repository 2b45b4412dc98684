"""The float-ready Kajitsuka & Sato networks (``--max-bits P``): certified with the float-exact
claim, every label exact in onnxruntime float32, and tampered float claims rejected."""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exactmem.certificate import claim_float_exact, spec_from_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.constructions.kajitsuka2025_float import build_float_ready
from exactmem.datasets.draw import generate
from exactmem.errors import ConstructionError
from exactmem.model.sizes import sizes
from exactmem.pipeline import certify


@pytest.fixture(scope="module")
def next_token() -> dict[str, Any]:
    ds = generate(task="next-token", N=160, n=16, vocab=64, classes=8, seed=3)
    out = certify(ds, "kajitsuka2025-next-token", {"max_bits": 24, "seed": 1})
    assert out.report.verified, out.report.failures[:3]
    return out.certificate


def test_next_token_certified_float32(next_token: dict[str, Any]) -> None:
    cert = next_token
    assert cert["claims"]["float_exact"] == ["float32"]
    assert cert["sizes"]["max_bits"] <= 24
    report = check_certificate(cert)
    assert report.verified and "float-exact in float32" in report.claim


def test_seq2seq_certified_float32() -> None:
    ds = generate(task="seq2seq", N=12, n=8, vocab=16, classes=4, seed=5)
    out = certify(ds, "kajitsuka2025-seq2seq", {"max_bits": 24}, float_exact=["float32",
                                                                               "float64"])
    assert out.report.verified, out.report.failures[:3]
    assert out.certificate["claims"]["float_exact"] == ["float32", "float64"]
    assert out.certificate["network"]["readout"]["positions"] == "every"


def test_onnxruntime_float32_gets_every_label_exactly(next_token: dict[str, Any]) -> None:
    pytest.importorskip("onnxruntime")
    from exactmem.certificate import dataset_from_certificate
    from exactmem.exporters.onnx_export import build_model, dataset_array, run_onnx

    ds = dataset_from_certificate(next_token)
    model = build_model(spec_from_certificate(next_token), "float32")
    outs, labels = run_onnx(model, dataset_array(ds, "float32"))
    assert outs.dtype == np.float32
    assert (outs[:, -1, 0].astype(np.float64) == np.array(ds.labels)).all()
    assert (labels == np.array(ds.labels)).all()


def _rescale_unit(cert: dict[str, Any], m: int, row: int, c: Fraction) -> dict[str, Any]:
    """Multiply hidden unit ``row`` of map ``m`` of the feed-forward block (weights and bias)
    by ``c > 0`` and its outgoing column by ``1 / c``: the exact function is unchanged
    (ReLU is positively homogeneous), only the float-exact claim can break."""
    bad = copy.deepcopy(cert)
    ff = next(la for la in bad["network"]["layers"] if la["type"] == "feedforward")
    first, second = ff["maps"][m], ff["maps"][m + 1]

    def scaled(x: str, by: Fraction) -> str:
        v = Fraction(x) * by
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"

    first["weight"][row] = [scaled(x, c) for x in first["weight"][row]]
    if first["bias"] is not None:
        first["bias"][row] = scaled(first["bias"][row], c)
    for r in second["weight"]:
        r[row] = scaled(r[row], 1 / c)
    bad["sizes"] = sizes(spec_from_certificate(bad)).as_dict()
    bad["digest"] = digest_of(bad)
    return bad


def _unit_used(cert: dict[str, Any], m: int) -> int:
    """A unit of map ``m`` with a non-zero bias and a non-zero outgoing weight."""
    ff = next(la for la in cert["network"]["layers"] if la["type"] == "feedforward")
    first, second = ff["maps"][m], ff["maps"][m + 1]
    for row, b in enumerate(first["bias"]):
        if b != "0" and any(r[row] != "0" for r in second["weight"]):
            return row
    raise AssertionError("no unit with a bias")


def test_weight_above_2_24_is_rejected(next_token: dict[str, Any]) -> None:
    row = _unit_used(next_token, 0)
    bad = _rescale_unit(next_token, 0, row, Fraction(2 ** 24 + 1))
    report = check_certificate(bad)
    assert not report.verified
    assert report.failures
    assert all("float_exact: not exact in float32" in f for f in report.failures)


def test_overflowing_partial_sum_is_rejected(next_token: dict[str, Any]) -> None:
    """Weights scaled by 2^20 are still floats, but a dot product's terms now exceed 2^24 units
    of its grid: some summation order may round.  Float64 still holds."""
    row = _unit_used(next_token, 0)
    bad = _rescale_unit(next_token, 0, row, Fraction(2 ** 20))
    report = check_certificate(bad)
    assert not report.verified
    assert report.failures
    assert all("a sum exceeds 2^P" in f for f in report.failures)
    redo = copy.deepcopy(bad)
    del redo["claims"]["float_exact"]
    redo["digest"] = digest_of(redo)
    assert claim_float_exact(redo, ["float32", "float64"]) == ["float64"]
    assert check_certificate(redo).verified


def test_sizes_and_refusals() -> None:
    ds = generate(task="next-token", N=64, n=8, vocab=16, classes=4, seed=2)
    res = build_float_ready(ds, {"max_bits": 24, "block_words": 2}, every=False)
    assert res.params["block_words"] == 2 and res.params["label_bits"] == 2
    assert sizes(res.spec).max_bits < 24
    with pytest.raises(ConstructionError, match="max_bits must be at least"):
        build_float_ready(ds, {"max_bits": 4}, every=False)
    big = generate(task="next-token", N=200, n=8, vocab=16, classes=4, seed=2)
    with pytest.raises(ConstructionError, match="raise --max-bits"):
        build_float_ready(big, {"max_bits": 8}, every=False)


def test_bfloat16_network_at_small_n() -> None:
    ds = generate(task="next-token", N=64, n=8, vocab=16, classes=4, seed=2)
    out = certify(ds, "kajitsuka2025-next-token", {"max_bits": 8})
    assert out.report.verified, out.report.failures[:3]
    assert out.certificate["claims"]["float_exact"] == ["bfloat16"]
    assert out.certificate["sizes"]["max_bits"] <= 8


def test_cli_certify_max_bits_and_float_exact_flag(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.cli import main

    d, c, bad = tmp_path / "d.json", tmp_path / "c.json", tmp_path / "bad.json"
    assert main(["generate", "--task", "next-token", "--N", "40", "--n", "8", "--vocab", "16",
                 "--classes", "4", "--seed", "1", "-o", str(d)]) == 0
    assert main(["certify", str(d), "-c", "kajitsuka2025-next-token", "--max-bits", "24",
                 "--float-exact", "float32", "--float-exact", "float64", "-o", str(c),
                 "-q"]) == 0
    assert "float-exact in float32, float64" in capsys.readouterr().out
    assert main(["check", str(c)]) == 0
    verdict = capsys.readouterr().out
    assert "float-exact in float32" in verdict and "float-exact in float64" in verdict
    # the float32 build's words do not fit bfloat16: the requested claim fails, nothing is written
    assert main(["certify", str(d), "-c", "kajitsuka2025-next-token", "--max-bits", "24",
                 "--float-exact", "bfloat16", "-o", str(bad), "-q"]) == 1
    assert not bad.exists()


def test_same_seed_same_certificate(next_token: dict[str, Any]) -> None:
    from exactmem.certificate import certificate_text, dataset_from_certificate

    ds = dataset_from_certificate(next_token)
    again = certify(ds, "kajitsuka2025-next-token", {"max_bits": 24, "seed": 1}).certificate
    assert certificate_text(again) == certificate_text(next_token)
    other = certify(ds, "kajitsuka2025-next-token", {"max_bits": 24, "seed": 2}).certificate
    assert other["network"] != next_token["network"]
