"""Mutation fuzzing of the checker (the small version of scripts/fuzz_checker.py): every
mutated certificate that the checker accepts must be a true, well-formed certificate by the
independent reference; every answer is a verdict, never an exception."""

from __future__ import annotations

import random
from typing import Any

import pytest
from fuzzing import SETTINGS, genuine, mutate, reference_accepts
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker import check_certificate
from exactmem.checker.strict_json import loads


@pytest.fixture(scope="module")
def certs() -> dict[str, Any]:
    return {name: genuine(name) for name in SETTINGS}


def _check(content: Any) -> Any:
    from exactmem.checker.verdict import Unusable
    from exactmem.checker.verify import CheckReport

    if isinstance(content, str):
        try:
            content = loads(content)
        except Unusable as exc:
            return CheckReport([str(exc)], unusable=True)
    else:
        from fuzzing import text_of

        try:
            content = loads(text_of(content))  # what the checker would read from the file
        except Unusable as exc:
            return CheckReport([str(exc)], unusable=True)
    return check_certificate(content)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), which=st.sampled_from(sorted(SETTINGS)))
def test_accepted_mutations_are_true_certificates(certs: dict[str, Any], seed: int,
                                                  which: str) -> None:
    desc, mutated = mutate(certs[which], random.Random(seed))
    report = _check(mutated)
    assert report.exit_code in (0, 1, 2)
    if report.verified:
        assert not isinstance(mutated, str), desc
        ok, why = reference_accepts(mutated)
        assert ok, f"{which}: {desc}: the checker accepted a false certificate ({why})"


def test_the_reference_accepts_the_genuine_and_refuses_a_false_one(certs: dict[str, Any]) -> None:
    for name, cert in certs.items():
        assert reference_accepts(cert) == (True, "true certificate"), name
    import copy

    from fuzzing import redigest

    bad = copy.deepcopy(certs["lookup"])
    bad["claims"]["outputs"][0] = ["2" if bad["claims"]["outputs"][0] != ["2"] else "1"]
    assert not reference_accepts(redigest(bad))[0]
