"""``exactmem info`` on the float-ready (``--max-bits``) networks: the bound that describes them
(not Theorem E.1), and label bits per nonzero parameter, per dense parameter and per stored bit,
one definition each, equal to the figures ``scripts/float_ready_table.py`` writes."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from exactmem.cli import main

ROOT = Path(__file__).resolve().parents[2]
NEXT = "kajitsuka2025-next-token"
READINGS = ("label_bits_per_nonzero", "label_bits_per_dense", "label_bits_per_stored_bit")


def table_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("float_ready_table",
                                                  ROOT / "scripts" / "float_ready_table.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["float_ready_table"] = mod
    spec.loader.exec_module(mod)
    return mod


def certify_and_info(tmp_path: Path, capsys: pytest.CaptureFixture[str], N: int,  # noqa: N803
                     *extra: str) -> dict[str, Any]:
    data, cert = tmp_path / f"d{N}.json", tmp_path / f"c{N}{'-'.join(extra)}.json"
    assert main(["generate", "--task", "next-token", "--N", str(N), "--n", "16", "--vocab",
                 "64", "--classes", "8", "--seed", "1", "-o", str(data), "-q"]) == 0
    assert main(["certify", str(data), "-c", NEXT, "--seed", "1", *extra, "-o", str(cert),
                 "-q"]) == 0
    capsys.readouterr()
    assert main(["info", str(cert), "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_max_bits_info_matches_the_csv(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    got = certify_and_info(tmp_path, capsys, 256, "--max-bits", "24")
    bound = got["bound"]
    assert "theorem" not in bound and "width" not in bound and "E.1" not in bound["form"]
    assert bound["bits"] == 24 and "float-ready" in bound["construction"]
    assert got["measured_over_bound"].keys() == {"params", "bits"}
    # the definitions, each once
    assert got["stored_dtype"] == "float32" and got["stored_dtype_exact"] is True
    assert got["label_bits"] == 768
    assert got["label_bits_per_nonzero"] == round(768 / got["params_nonzero"], 6)
    assert got["label_bits_per_dense"] == round(768 / got["params_dense"], 6)
    assert got["label_bits_per_stored_bit"] == round(768 / (32 * got["params_dense"]), 6)
    assert got["lower_bounds"]["counting_P"]["value"] == round(768 / 25, 3)
    # the CSV row the table script writes for the same data and seed, read back
    table = table_module()
    row = table.measure(NEXT, 24, 256, 16, 8, 1)
    table._write([row], tmp_path / "t.csv")
    with (tmp_path / "t.csv").open() as fh:
        (back,) = list(csv.DictReader(fh))
    for key in READINGS:
        assert float(back[key]) == got[key] > 0, key
    for key in ("params_nonzero", "params_dense", "max_bits", "weight_bits_total"):
        assert int(back[key]) == got[key], key
    assert back["stored_dtype"] == got["stored_dtype"]


def test_unbounded_keeps_its_theorem_and_says_float64(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got = certify_and_info(tmp_path, capsys, 32)
    assert got["bound"]["theorem"] == "E.1" and got["bound"]["width"] == 14
    assert "counting_P" not in got["lower_bounds"]
    assert got["stored_dtype"] == "float64" and got["stored_dtype_exact"] is False
    assert got["label_bits_per_stored_bit"] == round(96 / (64 * got["params_dense"]), 6)
    assert got["weight_bits_total"] >= got["params_nonzero"]


def test_info_text_names_the_float_ready_bound(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    got = certify_and_info(tmp_path, capsys, 64, "--max-bits", "24")
    cert = next(tmp_path.glob("c64*.json"))
    assert main(["info", str(cert)]) == 0
    text = capsys.readouterr().out
    assert "E.1" not in text.replace("Theorem E.1 / B.1 does not describe it", "")
    assert "width    14" not in text
    for key in READINGS:
        assert f"{key:26s} {got[key]}" in text
    assert "bits of float32" in text and "weight_bits_total" in text
    assert math.isclose(got["label_bits"], 64 * 3)
    import exactmem

    short = str(exactmem.info(cert))  # the API's short report carries the same readings
    assert f"label_bits_per_dense {got['label_bits_per_dense']}" in short
    assert "(float32)" in short
