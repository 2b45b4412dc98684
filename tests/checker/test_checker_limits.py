"""Limits on what the checker builds, not only on the text it reads (docs/certificate-format.md,
"Resource limits"): JSON values, decompressed gzip bytes, bits of common denominators, bits
of a scaled matrix; and bound dataset paths that stay inside the certificate's folder."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from crafted_limits import REFERENCE, coprime_certificate, gzip_bomb

from exactmem.checker import check_file, parse, strict_json
from exactmem.checker.strict_json import read_json
from exactmem.checker.verdict import Unusable
from exactmem.cli import main


def test_a_small_gzip_bomb_stops_at_the_decompressed_cap(tmp_path: Path) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 4 << 20)  # 4 MiB of [{},{},...]
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(Unusable, match="MAX_FILE_BYTES"):
        read_json(bomb, max_bytes=1 << 20, max_nodes=1 << 30)


def test_a_small_gzip_bomb_stops_at_the_node_limit(tmp_path: Path) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 4 << 20)
    with pytest.raises(Unusable, match="MAX_NODES"):
        read_json(bomb, max_nodes=100_000)


def test_the_node_limit_counts_values_of_plain_text(tmp_path: Path) -> None:
    path = tmp_path / "lists.json"
    path.write_text("[" + ",".join(["[]"] * 5000) + "]")
    assert len(read_json(path, max_nodes=5001)) == 5000
    with pytest.raises(Unusable, match="more than 4999 JSON values"):
        read_json(path, max_nodes=4999)
    with pytest.raises(Unusable, match="MAX_NODES"):
        strict_json.loads(path.read_text(), max_nodes=100)


def test_check_answers_a_bomb_unusable_naming_the_limit(tmp_path: Path, monkeypatch,
                                                        capsys) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 4 << 20)
    monkeypatch.setattr(strict_json, "MAX_NODES", 200_000)
    assert main(["check", str(bomb), "-q"]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "s UNUSABLE"
    assert "MAX_NODES" in err


def test_genuine_gzip_certificates_still_verify(tmp_path: Path) -> None:
    path = tmp_path / "ref.json.gz"
    path.write_bytes(gzip.compress(REFERENCE.read_bytes()))
    assert check_file(path).verified


def test_coprime_denominators_are_refused_before_any_arithmetic(tmp_path: Path) -> None:
    cert = coprime_certificate(tmp_path / "coprime.json")
    assert cert.stat().st_size > 250_000
    report = check_file(cert)
    assert report.unusable
    assert "MAX_DEN_BITS" in report.failures[-1]
    assert "network.layers[0].table" in report.failures[-1]


def test_the_forward_pass_denominators_are_bounded(monkeypatch) -> None:
    # the reference's matrices need 15 bits, its forward pass forms a 17-bit denominator
    assert check_file(REFERENCE).verified
    monkeypatch.setattr(parse, "MAX_DEN_BITS", 16)
    report = check_file(REFERENCE)
    assert report.unusable and "MAX_DEN_BITS" in report.failures[-1]
    assert "network" not in report.failures[-1]  # found while evaluating, not while parsing


def test_a_matrix_scaled_to_its_denominator_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(parse, "MAX_MATRIX_BITS", 64)
    report = check_file(REFERENCE)
    assert report.unusable and "MAX_MATRIX_BITS" in report.failures[-1]


# ---------------------------------------------------------------- bound dataset paths
def _bound(tmp: Path, folder: str, path: str) -> Path:
    """The reference certificate in ``tmp/folder`` with its dataset bound by ``path``
    (the dataset written at ``tmp/data/d.json`` and ``tmp/folder/d.json``)."""
    cert = json.loads(REFERENCE.read_text())
    data = cert["dataset"].pop("data")
    for where in (tmp / "data", tmp / folder):
        where.mkdir(exist_ok=True)
        (where / "d.json").write_text(json.dumps(data))
    cert["dataset"]["path"] = path
    from crafted_limits import _digest

    cert["digest"] = _digest(cert)
    out = tmp / folder / "c.json"
    out.write_text(json.dumps(cert))
    return out


def test_a_dataset_inside_the_folder_verifies(tmp_path: Path) -> None:
    assert check_file(_bound(tmp_path, "certs", "d.json")).verified
    (tmp_path / "certs" / "sub").mkdir()
    (tmp_path / "certs" / "sub" / "d.json").write_text((tmp_path / "data" / "d.json").read_text())
    assert check_file(_bound(tmp_path, "certs", "sub/d.json")).verified


@pytest.mark.parametrize("name", ["../data/d.json", "sub/../../data/d.json", "ABSOLUTE",
                                  "/etc/passwd", "sub/..\\..\\d.json", "."])
def test_a_dataset_outside_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    if name == "ABSOLUTE":
        name = str(tmp_path / "data" / "d.json")
    report = check_file(_bound(tmp_path, "certs", name))
    assert report.unusable
    assert "inside the certificate's folder" in report.failures[-1]


def test_a_symlink_leading_outside_is_refused(tmp_path: Path) -> None:
    cert = _bound(tmp_path, "certs", "link.json")
    os.symlink(tmp_path / "data" / "d.json", tmp_path / "certs" / "link.json")
    report = check_file(cert)
    assert report.unusable and "link leading outside" in report.failures[-1]
    (tmp_path / "certs" / "inner.json").symlink_to("d.json")  # a link inside is fine
    assert check_file(_bound(tmp_path, "certs", "inner.json")).verified


def test_certify_refuses_to_bind_a_dataset_outside_the_folder(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    cert = json.loads(REFERENCE.read_text())
    (data / "d.json").write_text(json.dumps(cert["dataset"]["data"]))
    (tmp_path / "out").mkdir()
    code = main(["certify", str(data / "d.json"), "-c", "lookup", "-o",
                 str(tmp_path / "out" / "c.json"), "--bind-dataset", "-q"])
    assert code == 2
    assert "inside the certificate's folder" in capsys.readouterr().err
    assert not (tmp_path / "out" / "c.json").exists()
