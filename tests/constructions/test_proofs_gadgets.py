"""The gadget proofs (Z3) hold, and the reference certificates still verify with the checker."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from exactmem.checker import check_file
from proofs import lemma_gadgets
from proofs.framework import discover

REFERENCE = Path(__file__).resolve().parents[2] / "proofs" / "reference"


@pytest.mark.parametrize("n", [1, 2, 7, 32])
def test_threshold_bit_extraction_proved(n: int) -> None:
    assert lemma_gadgets.threshold_chain(n).status == "proved"


@pytest.mark.parametrize("n", [1, 3, 9])
def test_tent_bit_extraction_proved(n: int) -> None:
    assert lemma_gadgets.tent_chain(n).status == "proved"


def test_other_gadget_lemmas_proved() -> None:
    for check in (lemma_gadgets.interval_indicator_symbolic, lemma_gadgets.unit_interval_lemma,
                  lemma_gadgets.label_selection):
        outcome = check()
        assert outcome.status == "proved", outcome.detail


def test_gadget_lemmas_are_discovered() -> None:
    names = {lemma.name for lemma in discover()}
    assert {"gadget.G4.threshold-bit-extraction", "gadget.G2.interval-indicator",
            "gadget.G5.unit-interval", "gadget.G6.label-selection"} <= names


def test_a_wrong_claim_is_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof procedure can fail: a network with a wrong threshold is refuted."""
    from exactmem.constructions import _gadgets

    real = _gadgets.bit_units
    monkeypatch.setattr(_gadgets, "bit_units", lambda u, t: real(u, t + 1))
    assert lemma_gadgets.threshold_chain(3).status == "failed"
    monkeypatch.setattr(_gadgets, "_tent", lambda z: ({z: 2}, {z: 4, "1": -1}))
    assert lemma_gadgets.tent_chain(4).status == "failed"


def _manifest() -> list[tuple[str, str]]:
    lines = (REFERENCE / "MANIFEST.sha256").read_text().splitlines()
    return [(line.split()[0], line.split()[1]) for line in lines if line.strip()]


def test_manifest_lists_every_reference_certificate() -> None:
    listed = {name for _, name in _manifest()}
    assert listed == {p.name for p in REFERENCE.glob("*.json")}
    assert len(listed) >= 4


@pytest.mark.parametrize("digest,name", _manifest())
def test_reference_certificate_verifies(digest: str, name: str) -> None:
    path = REFERENCE / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    report = check_file(path)
    assert report.verified, report.failures[:5]
