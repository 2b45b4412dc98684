"""Certificates: canonical, self-digesting, and every tampering is rejected."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from exactmem.certificate import (
    build_certificate,
    certificate_text,
    digest_of,
    spec_from_certificate,
)
from exactmem.checker import check_certificate, check_file
from exactmem.constructions import get
from exactmem.datasets.draw import generate


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    ds = generate("next-token", N=40, n=4, vocab=6, classes=4, seed=5)
    return build_certificate(ds, get("lookup").build(ds, {"seed": 1}), "lookup")


def redigest(c: dict[str, Any]) -> dict[str, Any]:
    c["digest"] = digest_of(c)
    return c


def last_ff_weight(c: dict[str, Any]) -> list[list[str]]:
    return c["network"]["layers"][-1]["maps"][1]["weight"]


def test_untouched_certificate_verifies_and_is_canonical(cert: dict[str, Any]) -> None:
    assert check_certificate(cert).verified
    ds = generate("next-token", N=40, n=4, vocab=6, classes=4, seed=5)
    again = build_certificate(ds, get("lookup").build(ds, {"seed": 1}), "lookup")
    assert certificate_text(again) == certificate_text(cert)
    assert spec_from_certificate(cert) == get("lookup").build(ds, {"seed": 1}).spec


@pytest.mark.parametrize("edit, message", [
    (lambda c: last_ff_weight(c)[0].__setitem__(4, "5"), "digest"),
    (lambda c: c["dataset"]["data"]["labels"].__setitem__(3, 1 + c["dataset"]["data"]["labels"][3]),
     "digest"),
    (lambda c: c["network"]["layers"][0]["table"][0].__setitem__(2, "7/3"), "digest"),
    (lambda c: c["dataset"].__setitem__("sha256", "0" * 64), "digest"),
])
def test_any_single_edit_breaks_the_digest(cert: dict[str, Any], edit: Any, message: str) -> None:
    c = copy.deepcopy(cert)
    edit(c)
    report = check_certificate(c)
    assert not report.verified and report.exit_code == 1
    assert any(message in f for f in report.failures)


def test_redigested_weight_edit_names_the_failing_sequences(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    w = last_ff_weight(c)[0]
    w[-3] = str(int(w[-3]) + 4)  # the rising unit of the last context's tent
    report = check_certificate(redigest(c))
    assert not report.verified
    failing = [f for f in report.failures if "readout" in f]
    assert failing and all(f.startswith("sequence ") for f in failing)


def test_redigested_label_edit_is_rejected(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    labels = c["dataset"]["data"]["labels"]
    labels[7] = labels[7] + 1
    from exactmem.model import dataset_from_json

    c["dataset"]["sha256"] = dataset_from_json(c["dataset"]["data"]).sha256()
    report = check_certificate(redigest(c))
    assert any(f.startswith("sequence 7, position 3, readout") for f in report.failures)


def test_redigested_denominator_edit_is_rejected(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    table = c["network"]["layers"][0]["table"]
    table[0][c["dataset"]["data"]["sequences"][0][0]] += "/2"
    report = check_certificate(redigest(c))
    assert not report.verified and any("sequence" in f for f in report.failures)


def test_dataset_hash_mismatch_is_named(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    c["dataset"]["sha256"] = "0" * 64
    report = check_certificate(redigest(c))
    assert any("dataset" in f and "SHA-256" in f for f in report.failures)


def test_wrong_claims_and_sizes_are_rejected(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    c["claims"]["outputs"][2] = ["99"]
    c["sizes"]["params_nonzero"] += 1
    failures = check_certificate(redigest(c)).failures
    assert any("sequence 2" in f and "claimed" in f for f in failures)
    assert any(f.startswith("sizes") for f in failures)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": "other"}',
                                  '{"format": "exactmem.certificate/1"}'])
def test_malformed_files_are_unusable(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    report = check_file(path)
    assert report.exit_code == 2 and not report.verified


def test_float_in_a_certificate_is_unusable(cert: dict[str, Any], tmp_path: Path) -> None:
    c = copy.deepcopy(cert)
    last_ff_weight(c)[0][0] = 1.0
    path = tmp_path / "c.json"
    path.write_text(json.dumps(redigest(c)))
    report = check_file(path)
    assert report.exit_code == 2 and any("float" in f for f in report.failures)


def test_missing_file_is_unusable(tmp_path: Path) -> None:
    assert check_file(tmp_path / "nope.json").exit_code == 2
