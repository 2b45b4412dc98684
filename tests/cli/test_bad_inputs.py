"""Every verb over a corpus of bad files: exit 2 (unusable input), never a traceback.

Each case runs ``python -m exactmem VERB ...`` in a subprocess with a time limit, so a hang
or a crash (RecursionError, MemoryError, UnicodeDecodeError ...) is caught as such.  Exit 1
is reserved for a negative verdict and must not appear for unusable input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from exactmem.cli import build_parser, main

TIMEOUT = 300  # hang guard per case (it waits for the exit); a case answers in about one second

Corpus = dict[str, Callable[[Path, Path], Path]]  # case -> (good file, folder) -> bad path


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def _nan(good: Path) -> bytes:
    obj = json.loads(good.read_text())
    if "labels" in obj:
        obj["labels"][0] = float("nan")
    else:
        obj["sizes"]["depth"] = float("nan")
    return json.dumps(obj).encode()


CASES: Corpus = {
    "binary": lambda good, d: _write(d, "binary.json", bytes(range(256)) * 64),
    "truncated": lambda good, d: _write(d, "truncated.json",
                                        good.read_bytes()[: len(good.read_bytes()) // 2]),
    "empty": lambda good, d: _write(d, "empty.json", b""),
    "utf16": lambda good, d: _write(d, "utf16.json", good.read_text().encode("utf-16")),
    "bom": lambda good, d: _write(d, "bom.json", b"\xef\xbb\xbf" + good.read_bytes()),
    "deep": lambda good, d: _write(d, "deep.json", b"[" * 100_000 + b"]" * 100_000),
    "huge-number": lambda good, d: _write(
        d, "huge.json", good.read_bytes().replace(b"{", b'{"huge": ' + b"7" * 10**6 + b", ", 1)),
    "nan": lambda good, d: _write(d, "nan.json", _nan(good)),
    "directory": lambda good, d: d,
    "missing": lambda good, d: d / "no-such-file.json",
    "device": lambda good, d: Path("/dev/zero"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A good dataset, certificate and (where torch is installed) model file."""
    root = tmp_path_factory.mktemp("good")
    data, cert, model = root / "d.json", root / "c.json", root / "model.pt"
    assert main(["generate", "--N", "6", "--n", "3", "--vocab", "4", "--seed", "2",
                 "-o", str(data), "-q"]) == 0
    assert main(["certify", str(data), "-c", "lookup", "-o", str(cert), "-q"]) == 0
    out = {"dataset": data, "certificate": cert, "root": root}
    if main(["export", str(cert), "--format", "torch", "-o", str(model), "--no-check",
             "-q"]) == 0:
        out["model"] = model
        try:  # a language-model checkpoint, for the verbs that read one (extract)
            from exactmem.lm.checkpoints.random_models import random_gpt2

            random_gpt2(root / "lm", seed=0, layers=1, d_model=8)
            out["lm"] = root / "lm"
            from exactmem.lm.tokens import next_token_dataset
            from exactmem.model.dataset import save_dataset

            rows = np.random.default_rng(0).integers(0, 64, size=(4, 4))
            save_dataset(next_token_dataset(rows, 64), root / "lm.json")
            out["lmdata"] = root / "lm.json"
            # the good pair runs: the bad cases fail for the file they break
            assert main(["extract", str(root / "lm"), str(root / "lm.json"), "-o",
                         str(root / "x.json"), "--prefix", "2", "--suffix", "1", "-q"]) == 0
        except ImportError:
            pass
    return out


def exactmem(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EXACTMEM_DEBUG"}
    env["EXACTMEM_QUIET"] = "1"
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=TIMEOUT, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL)


def assert_unusable(proc: subprocess.CompletedProcess[str]) -> None:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode == 2, f"exit {proc.returncode}: {out[-2000:]}"
    assert proc.stderr.strip(), "no message on stderr"


# verb -> (which good file the corpus is made from, argv with BAD and OUT placeholders)
VERBS: dict[str, tuple[str, list[str]]] = {
    "certify": ("dataset", ["certify", "BAD", "-c", "lookup", "-o", "OUT"]),
    "search": ("dataset", ["search", "BAD", "--timeout", "5"]),
    "check": ("certificate", ["check", "BAD"]),
    "check-search": ("certificate", ["check-search", "BAD"]),
    "info": ("certificate", ["info", "BAD"]),
    "export": ("certificate", ["export", "BAD", "--format", "onnx", "-o", "OUT"]),
    "precision": ("certificate", ["precision", "BAD", "--no-search"]),
    "certify-model/model": ("model", ["certify-model", "BAD", "DATA", "-o", "OUT"]),
    "certify-model/data": ("dataset", ["certify-model", "MODEL", "BAD", "-o", "OUT"]),
    "extract/model": ("model", ["extract", "BAD", "DATA", "-o", "OUT"]),
    "extract/data": ("lmdata", ["extract", "LM", "BAD", "-o", "OUT", "--prefix", "2",
                                "--suffix", "1"]),
}


def _registered() -> set[str]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("the parser has no verbs")


def test_every_file_reading_verb_is_in_the_corpus_run() -> None:
    covered = {name.split("/")[0] for name in VERBS} | {"generate", "prove", "check-proof"}
    assert _registered() <= covered, f"verbs without bad-input cases: {_registered() - covered}"


Run = subprocess.CompletedProcess[str] | str  # a finished run, or why it was skipped


@pytest.fixture(scope="module")
def corpus_runs(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
                ) -> dict[tuple[str, str], Run]:
    """Every (verb, case) run, four processes at a time (each is mostly interpreter start)."""
    from concurrent.futures import ThreadPoolExecutor

    verbs = _registered()
    jobs: dict[tuple[str, str], Callable[[], Run]] = {}
    for verb, (kind, argv) in VERBS.items():
        for case, make in CASES.items():
            if verb.split("/")[0] not in verbs:
                jobs[verb, case] = partial(str, f"no verb {verb} in this installation")
                continue
            if "model" not in files and (kind == "model" or "MODEL" in argv):
                jobs[verb, case] = partial(str, "no torch export in this installation")
                continue
            if ("lm" not in files or kind not in files) and "LM" in argv:
                jobs[verb, case] = partial(str, "no transformers in this installation")
                continue
            work = tmp_path_factory.mktemp("case")
            folder = work / "bad"
            folder.mkdir()
            # text-derived cases of a binary model file start from the certificate's text
            good = files["certificate"] if kind == "model" and case in ("nan", "utf16") \
                else files[kind]
            bad = make(good, folder)
            subst = {"BAD": str(bad), "OUT": str(work / "out.bin"),
                     "DATA": str(files["dataset"]), "MODEL": str(files.get("model", "")),
                     "LM": str(files.get("lm", ""))}
            args = [subst.get(a, a) for a in argv]
            jobs[verb, case] = partial(exactmem, *args, cwd=work)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(job) for key, job in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_bad_file_is_unusable_input(verb: str, case: str,
                                    corpus_runs: dict[tuple[str, str], Run]) -> None:
    run = corpus_runs[verb, case]
    if isinstance(run, str):
        pytest.skip(run)
    assert_unusable(run)
    assert not any(Path(a).name == "out.bin" and Path(a).exists() for a in run.args)


@pytest.mark.parametrize("case", ["binary", "empty", "deep", "directory", "missing", "device"])
def test_check_proof_bad_files(case: str, files: dict[str, Path], tmp_path: Path) -> None:
    if "check-proof" not in _registered():
        pytest.skip("no verb check-proof")
    good = _write(tmp_path, "good.cnf", b"p cnf 1 2\n1 0\n-1 0\n")
    folder = tmp_path / "bad"
    folder.mkdir()
    bad = CASES[case](good, folder)
    assert_unusable(exactmem("check-proof", str(bad), str(good), cwd=tmp_path))
    if case != "empty":  # an empty proof is a proof (unit propagation refutes this CNF)
        assert_unusable(exactmem("check-proof", str(good), str(bad), cwd=tmp_path))


@pytest.mark.parametrize("argv", [
    ["--N", "0"], ["--n", "0"], ["--classes", "0"], ["--vocab", "0"], ["--dim", "0"],
    ["--N", "-3"], ["--N", "ten"],
])
def test_generate_refuses_sizes_below_one(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    assert_unusable(exactmem("generate", *argv, "-o", str(out), cwd=tmp_path))
    assert not out.exists()


@pytest.mark.parametrize("where", ["missing-folder", "directory", "device-folder"])
@pytest.mark.parametrize("verb", ["generate", "certify", "export-torch", "export-onnx",
                                  "export-safetensors", "precision-json"])
def test_unwritable_output(verb: str, where: str, files: dict[str, Path],
                           tmp_path: Path) -> None:
    out = {"missing-folder": tmp_path / "no" / "such" / "x.json", "directory": tmp_path,
           "device-folder": Path("/dev/null/x.json")}[where]
    data, cert = str(files["dataset"]), str(files["certificate"])
    argv = {"generate": ["generate", "--N", "3", "-o"],
            "certify": ["certify", data, "-c", "lookup", "-o"],
            "export-torch": ["export", cert, "--format", "torch", "-o"],
            "export-onnx": ["export", cert, "--format", "onnx", "-o"],
            "export-safetensors": ["export", cert, "--format", "safetensors", "-o"],
            "precision-json": ["precision", cert, "--no-search", "--json"]}[verb]
    proc = exactmem(*argv, str(out), cwd=tmp_path)
    assert_unusable(proc)
    assert proc.stderr.count("\n") == 1 and "cannot write" in proc.stderr


def test_prove_filter_matching_nothing(tmp_path: Path) -> None:
    proc = exactmem("prove", "no-such-lemma", cwd=tmp_path)
    assert_unusable(proc)
    assert "tent-bit-extraction" in proc.stderr  # the message lists the lemma names


def test_written_files_follow_the_umask(files: dict[str, Path], tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        out = tmp_path / "d.json"
        assert main(["generate", "--N", "3", "-o", str(out), "-q"]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o640
    assert files["certificate"].stat().st_mode & 0o777 == 0o666 & ~old
