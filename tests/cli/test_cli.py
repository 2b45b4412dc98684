"""The command line, end to end, as a user runs it."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exactmem.checker.entry import checker_line
from exactmem.cli import build_parser, main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=300)


def _verbs() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the parser has no verbs")


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
    assert proc.returncode == 1 and proc.stdout == f"{checker_line()}\ns REJECTED\n"
    assert "digest" in proc.stderr


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
    assert proc.returncode == 2 and proc.stdout == f"{checker_line()}\ns UNUSABLE\n"


def test_option_of_another_construction_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d.json"
    assert main(["generate", "--N", "5", "--n", "2", "--vocab", "4", "-o", str(d)]) == 0
    assert main(["certify", str(d), "-c", "lookup", "-o", str(tmp_path / "c.json"),
                 "--seed", "3", "-q"]) == 0


def test_every_verb_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    verbs = _verbs()
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




def test_help_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    """Every verb has --quiet; no doubled defaults, internal metavars or docs that do not ship."""
    for name, sub in _verbs().items():
        text = sub.format_help()
        assert "--quiet" in text, f"{name} has no --quiet"
        assert "(default: None)" not in text and "OPT_" not in text, name
        assert not re.search(r"\(default [^)]*\) \(default", text), name


def test_quiet_turns_progress_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from exactmem import progress
    from exactmem.commands import generate

    seen: list[bool] = []

    def given(value: int | None, default: int) -> int:
        seen.append(progress.is_quiet())
        return default if value is None else value

    monkeypatch.setattr(generate, "_given", given)
    monkeypatch.delenv("EXACTMEM_QUIET", raising=False)
    assert main(["generate", "--N", "3", "-o", str(tmp_path / "d.json"), "-q"]) == 0
    assert main(["generate", "--N", "3", "-o", str(tmp_path / "d.json")]) == 0
    assert seen[0] and not seen[-1]  # on during the -q run only, restored afterwards


def test_prove_filter_uses_hyphens_and_names_the_lemmas() -> None:
    proc = run("prove", "label_selection", "--quick")
    assert proc.returncode == 0, proc.stderr
    assert "gadget.G6.label-selection" in proc.stdout and "1 of 1 lemmas proved" in proc.stdout
    proc = run("prove", "no-such-lemma")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "gadget.G4.tent-bit-extraction" in proc.stderr
    listed = run("prove", "--list").stdout.split()
    assert "gadget.G4.tent-bit-extraction" in listed and "exp-taylor-lower" in listed


def test_prove_quick_proves_a_smaller_instance(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "threshold-bit-extraction", "--quick", "-q"]) == 0
    out = capsys.readouterr().out
    assert "(quick: all n = 1..12, 90 maps)" in out and "1 of 1 lemmas proved (quick)" in out


def test_proofs_run_as_a_program_beside_the_package() -> None:
    """``exactmem prove`` runs ``proofs/`` as a program (``python -m proofs`` in a checkout,
    ``python -m exactmem._proofs`` when installed), never imports it; the wheel installs it
    inside the package, never as a top-level ``proofs`` package."""
    from exactmem.api.lemmas import framework

    fw = framework()
    assert fw.module in ("proofs", "exactmem._proofs")
    names = [lemma.name for lemma in fw.discover()]
    assert len(names) >= 9 and "gadget.G6.label-selection" in names
    assert [x.name for x in fw.select("label_selection")] == ["gadget.G6.label-selection"]
    assert fw.select("no-such-lemma") == []
    setup = (Path(__file__).resolve().parents[2] / "setup.py").read_text()
    assert '"exactmem._proofs"' in setup and '"proofs*"' not in setup


def test_the_proofs_program_reports_a_crash(tmp_path: Path) -> None:
    """A program that dies without its lines is an error, not "0 of 0 proved"."""
    from exactmem.api.lemmas import ProofsProgram
    from exactmem.errors import ExactmemError

    with pytest.raises(ExactmemError, match="exited with status"):
        list(ProofsProgram("exactmem._no_such_program").run())


def test_export_without_the_extra_names_it(tmp_path: Path) -> None:
    """A plain install (no extras): one line naming the extra, exit 2 (simulated by making
    the optional packages unimportable)."""
    d, c = tmp_path / "d.json", tmp_path / "c.json"
    assert main(["generate", "--N", "5", "--n", "2", "--vocab", "4", "-o", str(d)]) == 0
    assert main(["certify", str(d), "-c", "lookup", "-o", str(c), "-q"]) == 0
    blocker = ("import sys\n"
               "for m in ('torch', 'onnx', 'onnxruntime', 'safetensors', 'matplotlib'):\n"
               "    sys.modules[m] = None\n"
               "from exactmem.cli import main\n"
               "sys.exit(main(sys.argv[1:]))\n")
    cases = [["export", str(c), "--format", f, "-o", str(tmp_path / f"out.{f}")]
             for f in ("torch", "safetensors", "onnx")] + [["precision", str(c)]]
    for argv in cases:
        proc = subprocess.run([sys.executable, "-c", blocker, *argv], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert "pip install 'exactmem[export]'" in proc.stderr
        assert not list(tmp_path.glob("out.*"))
