"""The committed certificates of scripts/reproduce_capacity.py (docs/memorized-bits.md):
``exactmem check`` verifies them and states the memorized bits; a lowered code-length bound
or a changed weight is rejected."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from exactmem.checker.cert_dataset import canonical

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
CERTS = sorted(RESULTS.glob("capacity_gpt2_*.json.gz"))


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                          capture_output=True, text=True, check=False)


def smallest() -> Path:
    rows = list(csv.DictReader((RESULTS / "capacity_gpt2.csv").read_text().splitlines()))
    r = min(rows, key=lambda r: (int(r["params"]), int(r["N"])))
    return RESULTS / f"capacity_gpt2_{r['model']}_N{r['N']}.json.gz"


def tampered(tmp_path: Path, edit: Any) -> Path:
    cert = json.loads(gzip.decompress(smallest().read_bytes()))
    edit(cert)
    body = {k: v for k, v in cert.items() if k != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    out = tmp_path / "c.json"
    out.write_text(canonical(cert))
    return out


def test_two_certificates_are_committed_and_the_csv_names_four_sizes() -> None:
    assert len(CERTS) == 2
    rows = list(csv.DictReader((RESULTS / "capacity_gpt2.csv").read_text().splitlines()))
    assert len({r["params"] for r in rows}) >= 4
    for r in rows:
        assert float(r["certified_bits"]) <= float(r["float_bits"]) + 1e-6


@pytest.mark.parametrize("path", CERTS, ids=[p.name for p in CERTS])
def test_a_committed_certificate_is_verified_with_its_bits_below_uniform(path: Path) -> None:
    proc = check(path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "s VERIFIED"
    line = next(s for s in proc.stdout.splitlines() if "below the uniform code" in s)
    assert line.startswith("c claim: code length at most ")
    assert "for the 128 distinct sequences" in line and "uniform code over 64 tokens" in line
    assert "not memorized bits" in line


def test_a_lowered_code_length_bound_is_rejected(tmp_path: Path) -> None:
    def edit(cert: dict[str, Any]) -> None:
        c = Fraction(cert["claims"]["code_length_bits"][0]) - Fraction(1, 1 << 20)
        cert["claims"]["code_length_bits"][0] = f"{c.numerator}/{c.denominator}"

    proc = check(tampered(tmp_path, edit))
    assert proc.returncode == 1 and "s REJECTED" in proc.stdout
    assert "sequence 0: claimed code length" in proc.stderr


def test_a_changed_weight_is_rejected(tmp_path: Path) -> None:
    def edit(cert: dict[str, Any]) -> None:
        vals = cert["model"]["tensors"]["lnf.weight"]["values"]
        vals[0] = str(int(vals[0]) * 4 + 1)  # the final gain of one coordinate, about x4

    proc = check(tampered(tmp_path, edit))
    assert proc.returncode == 1 and "s REJECTED" in proc.stdout


def load_script() -> Any:
    import importlib.util

    path = RESULTS.parent.parent / "scripts" / "reproduce_capacity.py"
    spec = importlib.util.spec_from_file_location("reproduce_capacity", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smallest_model_has_a_curve_above_capacity_at_one_budget() -> None:
    """The plateau needs several dataset sizes above Morris et al.'s 3.83 bits/param at
    one training budget, each certified below its float estimate; both sums recorded."""
    rows = list(csv.DictReader((RESULTS / "capacity_gpt2.csv").read_text().splitlines()))
    params = min(int(r["params"]) for r in rows)
    by_budget: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if int(r["params"]) == params and float(r["reference_bits"]) > 3.83 * params:
            by_budget.setdefault(r["train_steps"], []).append(r)
    curve = max(by_budget.values(), key=len)
    assert len({r["N"] for r in curve}) >= 3
    for r in curve:
        assert float(r["certified_bits_unclipped"]) <= float(r["certified_bits"])
        assert float(r["certified_bits"]) <= float(r["float_bits"])


@pytest.mark.parametrize("argv", [["--only", "d0L0_N1_s1"], ["--check-shards", "0"]])
def test_bad_script_arguments_are_one_line_and_exit_2(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert load_script().main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
