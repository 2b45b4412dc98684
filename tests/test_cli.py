"""The command line, end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exactmem.cli import build_parser, main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=300)


def test_generate_certify_check_info(tmp_path: Path) -> None:
    d, c = tmp_path / "d.json", tmp_path / "c.json"
    assert main(["generate", "--task", "next-token", "--N", "300", "--n", "16", "--vocab", "64",
                 "--classes", "8", "--seed", "1", "-o", str(d)]) == 0
    assert main(["certify", str(d), "--construction", "lookup", "-o", str(c), "-q"]) == 0
    proc = run("check", str(c))
    assert proc.returncode == 0 and proc.stdout.endswith("\ns VERIFIED\n")
    assert proc.stdout.startswith("c claim: memorization (exact evaluation)")
    proc = run("info", str(c), "--json")
    data = json.loads(proc.stdout)
    for key in ("params_dense", "params_nonzero", "depth", "width", "max_bits", "N",
                "construction"):
        assert key in data
    assert data["N"] == 300 and data["construction"] == "lookup"
    # one weight changed: rejected through the digest, exit 1
    cert = json.loads(c.read_text())
    cert["network"]["layers"][-1]["maps"][1]["weight"][0][0] = "2"
    c.write_text(json.dumps(cert))
    proc = run("check", str(c))
    assert proc.returncode == 1 and proc.stdout == "s REJECTED\n" and "digest" in proc.stderr


def test_conflicting_duplicates_refused_without_a_file(tmp_path: Path) -> None:
    d, c = tmp_path / "d.json", tmp_path / "c.json"
    d.write_text(json.dumps({"format": "exactmem.dataset/1", "task": "next-token",
                             "inputs": "token-ids", "vocab_size": 4,
                             "sequences": [[1, 2], [0, 3], [1, 2]], "labels": [0, 1, 1]}))
    proc = run("certify", str(d), "--construction", "lookup", "-o", str(c))
    assert proc.returncode == 2
    assert "sequences 0 and 2" in proc.stderr
    assert not c.exists() and list(tmp_path.iterdir()) == [d]


def test_float_in_a_dataset_names_the_field(tmp_path: Path) -> None:
    d = tmp_path / "d.json"
    d.write_text(json.dumps({"format": "exactmem.dataset/1", "task": "next-token",
                             "inputs": "vectors", "dim": 1, "sequences": [[[0.25]]],
                             "labels": [0]}))
    proc = run("certify", str(d), "--construction", "lookup", "-o", str(tmp_path / "c.json"))
    assert proc.returncode == 2 and "sequences[0][0][0]" in proc.stderr


def test_unreadable_certificate_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    proc = run("check", str(bad))
    assert proc.returncode == 2 and proc.stdout == "s UNUSABLE\n"


def test_option_of_another_construction_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d.json"
    assert main(["generate", "--N", "5", "--n", "2", "--vocab", "4", "-o", str(d)]) == 0
    assert main(["certify", str(d), "-c", "lookup", "-o", str(tmp_path / "c.json"),
                 "--seed", "3", "-q"]) == 0


def test_every_verb_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"generate", "certify", "check", "info", "prove"} <= set(verbs)
    for name, sub in verbs.items():
        assert "example:" in (sub.epilog or ""), f"{name} --help has no example"


def test_standalone_checker_copy(tmp_path: Path) -> None:
    import shutil

    import exactmem.checker

    d, c = tmp_path / "d.json", tmp_path / "c.json"
    main(["generate", "--N", "20", "--n", "3", "--vocab", "5", "-o", str(d)])
    main(["certify", str(d), "-c", "lookup", "-o", str(c), "-q"])
    copy = tmp_path / "standalone" / "mychecker"
    shutil.copytree(Path(exactmem.checker.__file__).parent, copy)
    proc = subprocess.run([sys.executable, "-S", "-m", "mychecker", str(c)],
                          cwd=copy.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.endswith("\ns VERIFIED\n"), proc.stderr


def test_bound_dataset_is_checked_by_hash(tmp_path: Path) -> None:
    d, c = tmp_path / "data" / "d.json", tmp_path / "c.json"
    d.parent.mkdir()
    assert main(["generate", "--N", "30", "--n", "3", "--vocab", "5", "-o", str(d)]) == 0
    assert main(["certify", str(d), "-c", "lookup", "-o", str(c), "--bind-dataset", "-q"]) == 0
    cert = json.loads(c.read_text())
    assert cert["dataset"]["path"] == "data/d.json" and "data" not in cert["dataset"]
    assert run("check", str(c)).returncode == 0
    data = json.loads(d.read_text())
    data["labels"][0] = 1 - data["labels"][0]
    d.write_text(json.dumps(data))
    proc = run("check", str(c))
    assert proc.returncode == 1 and "SHA-256" in proc.stderr
