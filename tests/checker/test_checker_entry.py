"""Every entry point of the checker fails closed (an unexpected exception is ``s UNUSABLE``,
exit 2, never 1) and every verdict names the checker by the SHA-256 of its source files,
recomputed here from the definition in docs/checker.md."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

import exactmem.checker
from exactmem import cli
from exactmem.checker import __main__ as checker_main
from exactmem.checker import entry, verify
from exactmem.checker.proofs import drup, lrat, search_check

ROOT = Path(exactmem.checker.__file__).resolve().parent
REFERENCE = Path(__file__).resolve().parents[2] / "proofs" / "reference"


def expected_sha256() -> str:
    """The definition, written out again: every ``*.py`` under the checker's folder, by
    relative POSIX path; per file the path, NUL, its length in decimal, NUL, its bytes."""
    files = sorted((p.relative_to(ROOT).as_posix(), p) for p in ROOT.rglob("*.py"))
    assert len(files) > 20 and ("verify.py" in dict(files)) and "lm/lm_verify.py" in dict(files)
    h = hashlib.sha256()
    for name, path in files:
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("an unexpected failure inside the checker")


def _verdict(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    out, err = capsys.readouterr()
    return out.splitlines(), err


def test_python_m_checker_fails_closed(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(checker_main, "check_file", _boom)
    assert checker_main.main(["any.json"]) == 2
    out, err = _verdict(capsys)
    assert out == [f"c checker: sha256 {expected_sha256()}", "s UNUSABLE"]
    assert "RuntimeError" in err and "c checker:" not in err


def test_a_crash_deep_in_the_table_of_formats_fails_closed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cert = sorted(REFERENCE.glob("*.json"))[0]
    monkeypatch.setitem(verify.CHECKERS, verify.FORMAT, _boom)
    assert checker_main.main([str(cert)]) == 2
    assert _verdict(capsys)[0] == [f"c checker: sha256 {expected_sha256()}", "s UNUSABLE"]


@pytest.mark.parametrize("patch, argv", [
    ((verify, "check_file"), ["check", "c.json", "--quiet"]),
    ((drup, "check_proof_files"), ["check-proof", "f.cnf", "p.drat"]),
    ((lrat, "check_lrat_files"), ["check-proof", "f.cnf", "p.lrat"]),
    ((search_check, "check_search_file"), ["check-search", "answer.json"]),
])
def test_the_cli_verbs_fail_closed(patch: tuple[object, str], argv: list[str],
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(*patch, _boom)
    assert cli.main(argv) == 2
    out, err = _verdict(capsys)
    assert out[-2:] == [f"c checker: sha256 {expected_sha256()}", "s UNUSABLE"], (out, err)
    assert "RuntimeError" in err


def test_every_verdict_names_the_checker(tmp_path: Path) -> None:
    cert = sorted(REFERENCE.glob("*.json"))[0]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    line = f"c checker: sha256 {expected_sha256()}"
    for path, code in ((cert, 0), (bad, 2)):
        proc = subprocess.run([sys.executable, "-m", "exactmem.checker", str(path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr[-400:]
        assert proc.stdout.splitlines()[-2:] == [line, {0: "s VERIFIED", 2: "s UNUSABLE"}[code]]
        assert proc.stdout.startswith("c claim: ") == (code == 0), proc.stdout


def test_a_checker_that_cannot_hash_itself_gives_no_verdict(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cert = sorted(REFERENCE.glob("*.json"))[0]
    monkeypatch.setattr(entry, "checker_sha256", _boom)
    assert checker_main.main([str(cert)]) == 2
    out, err = _verdict(capsys)
    assert out[-2:] == ["c checker: sha256 unknown", "s UNUSABLE"] and "RuntimeError" in err
