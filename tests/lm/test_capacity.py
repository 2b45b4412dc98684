"""The capacity table of scripts/reproduce_capacity.py (docs/memorized-bits.md): three seeds a
row (a line not run yet is named in ``NOT_RUN``), a row in Morris et al.'s setting (V = 2,048,
S = 64, at least 100K parameters), every line's certificate hash recorded and equal to the
committed certificate's; ``exactmem check`` verifies committed certificates and states
memorized bits (the data is regenerated from its seed); a lowered code-length bound or a
changed weight is rejected."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from exactmem.checker.cert_dataset import canonical

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
SMALLEST = "capacity_gpt2_d28L2_V64_S16_N128_s1500_seed0.json.gz"
# (row, seed) lines of scripts/reproduce_capacity.py not run yet (docs/memorized-bits.md,
# "Best at a budget of S steps"); an entry goes when its line is added to the table
NOT_RUN: set[tuple[str, int]] = set()


def lines() -> list[dict[str, str]]:
    return list(csv.DictReader((RESULTS / "capacity_gpt2.csv").read_text().splitlines()))


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                          capture_output=True, text=True, check=False)


def tampered(tmp_path: Path, edit: Any) -> Path:
    cert = json.loads(gzip.decompress((RESULTS / SMALLEST).read_bytes()))
    edit(cert)
    body = {k: v for k, v in cert.items() if k != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    out = tmp_path / "c.json"
    out.write_text(canonical(cert))
    return out


def test_every_row_has_three_seeds_and_one_is_in_morris_setting() -> None:
    script = load_script()
    ran = {(r["row"], int(r["seed"])) for r in lines()}
    for row in script.ROWS:
        for seed in script.SEEDS:
            assert ((row.key, seed) in ran) != ((row.key, seed) in NOT_RUN), (row.key, seed)
    for r in lines():
        assert float(r["certified_bits"]) <= float(r["float_bits"]) + 1e-6
        assert r["checker_says_memorized"] == "True"
    assert any(r["V"] == "2048" and r["S"] == "64" and int(r["params"]) >= 100_000
               and sum(x["row"] == r["row"] for x in lines()) >= 3 for r in lines())


def test_the_summary_is_the_mean_min_and_max_of_the_lines() -> None:
    summary = list(csv.DictReader((RESULTS / "capacity_gpt2_summary.csv").read_text()
                                  .splitlines()))
    assert {s["row"] for s in summary} == {r["row"] for r in lines()}
    for s in summary:
        bits = [float(r["certified_bits"]) for r in lines() if r["row"] == s["row"]]
        assert len(s["seeds"].split()) == len(bits)
        assert float(s["certified_bits_min"]) == min(bits)
        assert float(s["certified_bits_max"]) == max(bits)
        assert abs(float(s["certified_bits_mean"]) - sum(bits) / len(bits)) < 1e-3


def test_every_line_records_a_hash_and_committed_certificates_match_it() -> None:
    committed = {p.name for p in RESULTS.glob("capacity_gpt2_*.json.gz")}
    named = set()
    for r in lines():
        assert re.fullmatch(r"[0-9a-f]{64}", r["cert_sha256"])
        if r["cert_file"]:
            named.add(r["cert_file"])
            body = gzip.decompress((RESULTS / r["cert_file"]).read_bytes())
            assert hashlib.sha256(body).hexdigest() == r["cert_sha256"]
    assert committed == named and SMALLEST in named


def test_a_committed_certificate_is_verified_with_memorized_bits() -> None:
    proc = check(RESULTS / SMALLEST)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "s VERIFIED"
    line = next(s for s in proc.stdout.splitlines() if "below the uniform code" in s)
    assert "memorized bits (Morris et al. 2025, the data is uniform random: regenerated " \
           "from seed 0 by exactmem.uniform-tokens/1)" in line
    row = next(r for r in lines() if r["cert_file"] == SMALLEST)
    assert f"at least {row['checker_bits']} bits" in line


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


def test_the_script_rows_are_the_table_rows() -> None:
    script = load_script()
    assert {r.key for r in script.ROWS} == {r["row"] for r in lines()}
    for r in lines():
        row = next(s for s in script.ROWS if s.key == r["row"])
        assert row.params == int(r["params"])


@pytest.mark.parametrize("argv", [["--only", "d0L0_N1_s1"], ["--check-shards", "0"],
                                  ["--seeds", "-1"], ["--verify", "d0L0_N1_s1"],
                                  ["--execution", "float64"]])
def test_bad_script_arguments_are_one_line_and_exit_2(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert load_script().main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
