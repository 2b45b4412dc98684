"""Every attack of the security review is answered as the grammar says: rejected (exit 1)
or unusable (exit 2), with a verdict line and no traceback; genuine certificates of all six
constructions verify and state the claim they prove."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzzing import SETTINGS, crafted, genuine, write

from exactmem.checker import check_file


@pytest.fixture(scope="module")
def certs() -> dict[str, Any]:
    return {name: genuine(name) for name in SETTINGS}


def test_genuine_certificates_verify_with_their_claim(certs: dict[str, Any],
                                                      tmp_path: Path) -> None:
    for name, cert in certs.items():
        report = check_file(write(tmp_path, f"{name}.json", cert))
        assert report.verified, (name, report.failures[:3])
        assert report.claim and report.claim.startswith("memorization"), name
        if name == "mahdavi2024-mha":
            assert "half the smallest gap" in report.claim


def test_every_crafted_attack_gets_its_verdict(certs: dict[str, Any], tmp_path: Path) -> None:
    cases = crafted(certs, tmp_path)
    assert len(cases) >= 24
    for name, path, code in cases:
        proc = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                              capture_output=True, text=True, timeout=120)
        verdict = {1: "s REJECTED", 2: "s UNUSABLE"}[code]
        assert proc.returncode == code, (name, proc.returncode, proc.stderr[-400:])
        assert proc.stdout.splitlines()[-1] == verdict, (name, proc.stdout)
        assert "Traceback" not in proc.stderr + proc.stdout, name


def test_the_false_mahdavi_certificate_names_the_epsilon_rule(certs: dict[str, Any],
                                                              tmp_path: Path) -> None:
    name, path, _ = crafted(certs, tmp_path)[0]
    report = check_file(path)
    assert not report.verified and not report.unusable, name
    assert any("half the smallest gap" in f for f in report.failures)
