"""Fuzzing the float-exact claim (the small version of scripts/fuzz_checker.py's ``float:*``
rows): every mutated certificate that the checker accepts with a float claim is true by the
oracle of tests/fuzzing_float.py, which never uses the checker; the oracle itself refuses the
crafted subnormal certificates that the old rule verified."""

from __future__ import annotations

import copy
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from fuzzing import redigest, text_of
from fuzzing_float import (
    FLOAT_SETTINGS,
    crafted_float,
    float_genuine,
    float_mutate,
    float_reference_accepts,
    float_runs_agree,
    tiny_network,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.certificate import dataset_from_certificate, spec_from_certificate
from exactmem.checker import check_certificate, check_file
from exactmem.checker.strict_json import loads
from exactmem.checker.verdict import Unusable
from exactmem.floats.formats import FORMATS, round_to_format


@pytest.fixture(scope="module")
def certs() -> dict[str, Any]:
    return {name: float_genuine(name) for name in FLOAT_SETTINGS}


def test_the_genuine_float_claims_are_true_and_verified(certs: dict[str, Any]) -> None:
    for name, cert in certs.items():
        assert float_reference_accepts(cert)[0], name
        report = check_certificate(cert)
        assert report.verified, (name, report.failures[:2])
        assert all(f"float-exact in {f} " in (report.claim or "")
                   for f in cert["claims"]["float_exact"])


@pytest.mark.parametrize(("exponent", "fmt"), [(130, "bfloat16"), (127, "float32"),
                                               (20, "float16")])
def test_the_oracle_refuses_a_subnormal_claim(exponent: int, fmt: str) -> None:
    value = Fraction(1, 2 ** exponent)
    assert round_to_format(value, FORMATS[fmt]) == value  # a float with gradual underflow
    cert = tiny_network([value], N=16)
    cert["claims"]["float_exact"] = [fmt]
    ok, why = float_reference_accepts(redigest(cert))
    assert not ok and "not a normal float" in why
    # the float runs alone see it too: in the normal range every output is lost
    held, why = float_runs_agree(spec_from_certificate(cert), dataset_from_certificate(cert),
                                 fmt)
    assert not held and "normal range float run differs" in why


def test_crafted_float_attacks_get_their_exit_codes(tmp_path: Path) -> None:
    for label, path, code in crafted_float(tmp_path):
        assert check_file(path).exit_code == code, label


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), which=st.sampled_from(sorted(FLOAT_SETTINGS)))
def test_accepted_float_mutations_are_true(certs: dict[str, Any], seed: int,
                                           which: str) -> None:
    desc, mutated = float_mutate(copy.deepcopy(certs[which]), random.Random(seed))
    try:
        report = check_certificate(loads(mutated if isinstance(mutated, str)
                                         else text_of(mutated)))
    except Unusable:
        return
    assert report.exit_code in (0, 1, 2)
    if report.verified:
        ok, why = float_reference_accepts(mutated)  # type: ignore[arg-type]
        assert ok, f"{which}: {desc}: the checker accepted a false certificate ({why})"
