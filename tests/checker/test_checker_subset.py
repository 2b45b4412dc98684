"""Subset claims: a certificate may claim that the network memorizes the sequences listed in
``claims.sequences``; the verdict names the subset, failures name the original indices."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fuzzing import genuine

from exactmem.certificate import claim_subset
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return genuine("lookup")


def test_a_subset_claim_verifies_and_says_so(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    claim_subset(c, [5, 0, 2])
    report = check_certificate(c)
    assert report.verified, report.failures[:3]
    assert "a subset: 3 of the 12 sequences" in (report.claim or "")
    assert "subset" not in (check_certificate(cert).claim or "")


def test_a_wrong_claim_in_the_subset_names_the_original_index(cert: dict[str, Any]) -> None:
    c = copy.deepcopy(cert)
    claim_subset(c, [3, 7])
    c["dataset"]["data"]["labels"][7] += 1  # the label of sequence 7 no longer matches
    from fuzzing import redigest

    report = check_certificate(redigest(c))
    assert not report.verified and not report.unusable
    assert any(f.startswith("sequence 7,") for f in report.failures)
    assert not any(f.startswith("sequence 1,") for f in report.failures)


@pytest.mark.parametrize("ids", [[2, 1], [0, 0], [99], [], [-1], "all"])
def test_malformed_subsets_are_unusable(cert: dict[str, Any], ids: Any) -> None:
    c = copy.deepcopy(cert)
    c["claims"]["sequences"] = ids
    c["claims"]["outputs"] = c["claims"]["outputs"][:len(ids) if isinstance(ids, list) else 1]
    c["digest"] = digest_of(c)
    assert check_certificate(c).unusable
