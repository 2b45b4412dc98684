"""Verification records (exactmem.api.verified): ``export`` does not run the checker again on
certificate bytes this checker verified, and reuses nothing when the bytes, a bound file or
the checker differ."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from token_data import token_dataset as shared_token_dataset

from exactmem.api import verified
from exactmem.cli import main
from exactmem.pipeline import certify

token_dataset = partial(shared_token_dataset, classes=5)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("EXACTMEM_CACHE", str(where))
    return where


@pytest.fixture()
def cert(tmp_path: Path) -> Path:
    path = tmp_path / "c.json"
    assert certify(token_dataset(7, N=40, n=4, V=6), "lookup", {}, out=path).report.verified
    return path


def test_check_records_and_export_reuses(cache: Path, cert: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert verified.lookup(cert) is None
    assert main(["check", str(cert)]) == 0
    rec = verified.lookup(cert)
    assert rec is not None and rec["bound"] == {}
    capsys.readouterr()
    assert main(["export", str(cert), "--format", "torch", "-o", str(tmp_path / "a.pt")]) == 0
    assert "not run again" in capsys.readouterr().out
    assert main(["export", str(cert), "--format", "torch", "-o", str(tmp_path / "b.pt"),
                 "--recheck"]) == 0
    assert "checker: VERIFIED" in capsys.readouterr().out


def test_export_records_its_own_check(cache: Path, cert: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(cert), "--format", "torch", "-o", str(tmp_path / "a.pt")]) == 0
    assert "checker: VERIFIED" in capsys.readouterr().out
    assert verified.lookup(cert) is not None


def test_changed_bytes_are_checked_again(cache: Path, cert: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(cert)]) == 0
    obj = json.loads(cert.read_text())
    obj["claims"]["outputs"][0][0] = "12345"
    cert.write_text(json.dumps(obj))
    assert verified.lookup(cert) is None
    out = tmp_path / "x.pt"
    assert main(["export", str(cert), "--format", "torch", "-o", str(out)]) == 1
    assert not out.exists()


def test_a_changed_bound_file_or_checker_voids_the_record(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "d.json"
    data.write_text("{}")
    cert = tmp_path / "bound.json"
    cert.write_text(json.dumps({"dataset": {"path": "d.json", "sha256": "0" * 64}}))
    verified.record(cert, "c claim: x")
    assert verified.lookup(cert) is not None
    data.write_text("{ }")
    assert verified.lookup(cert) is None
    data.write_text("{}")
    assert verified.lookup(cert) is not None
    monkeypatch.setattr("exactmem.checker.entry.checker_sha256", lambda: "f" * 64)
    assert verified.lookup(cert) is None
    data.unlink()
    assert verified.lookup(cert) is None


def test_an_edited_record_is_not_reused(cache: Path, tmp_path: Path) -> None:
    cert = tmp_path / "c.json"
    cert.write_text("{}")
    verified.record(cert, None)
    (rec,) = cache.glob("*.json")
    obj = json.loads(rec.read_text())
    obj["checker_sha256"] = "0" * 64
    rec.write_text(json.dumps(obj))
    assert verified.lookup(cert) is None


def test_certify_records_what_it_wrote(cache: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.json"
    assert main(["generate", "--task", "next-token", "--N", "12", "--n", "3", "--vocab", "4",
                 "--classes", "3", "-o", str(data)]) == 0
    out = tmp_path / "c.json"
    assert main(["certify", str(data), "--construction", "lookup", "-o", str(out)]) == 0
    assert verified.lookup(out) is not None
    capsys.readouterr()
    assert main(["export", str(out), "--format", "torch", "-o", str(tmp_path / "a.pt")]) == 0
    assert "not run again" in capsys.readouterr().out
