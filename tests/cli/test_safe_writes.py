"""Safe writes: no writer follows a symlink planted at a name it could have predicted, a
failed write leaves the target as it was, and no temporary file is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from token_data import token_dataset

from exactmem.cli import main
from exactmem.errors import OutputError
from exactmem.files.atomic import atomic_path, write_bytes_atomic, write_text_atomic
from exactmem.model.dataset import Dataset
from exactmem.pipeline import certify

VICTIM_TEXT = "precious data\n"


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset]:
    ds = token_dataset(7, N=40, n=4, V=6, classes=5)
    path = tmp_path_factory.mktemp("cert") / "c.json"
    assert certify(ds, "lookup", {}, out=path).report.verified
    return path, ds


def plant(folder: Path, names: list[str]) -> Path:
    """A victim file outside ``folder`` and a symlink to it at every name in ``names``."""
    victim = folder.parent / f"victim-{folder.name}.txt"
    victim.write_text(VICTIM_TEXT)
    for name in names:
        (folder / name).symlink_to(victim)
    return victim


def predictable(out: str) -> list[str]:
    """Every name a careless writer of ``out`` might use for its temporary file."""
    stem = out.rsplit(".", 1)[0]
    return [f"{out}.tmp", f".{out}.tmp", f"{out}~", f"{stem}.tmp", f"{out}.part",
            f"{out}.exact.json.tmp", f"{out}.exact.json~"]


@pytest.mark.parametrize("fmt,dtype", [("onnx", "float64"), ("safetensors", "float64"),
                                       ("torch", "float64")])
def test_export_never_writes_through_a_planted_symlink(
        certified: tuple[Path, Dataset], tmp_path: Path, fmt: str, dtype: str) -> None:
    cert, ds = certified
    folder = tmp_path / "shared"
    folder.mkdir()
    out = f"net.{fmt}"
    victim = plant(folder, predictable(out))
    assert main(["export", str(cert), "--format", fmt, "--dtype", dtype, "-o",
                 str(folder / out)]) == 0
    assert victim.read_text() == VICTIM_TEXT
    target = folder / out
    assert target.is_file() and not target.is_symlink()
    labels = np.array(ds.labels, dtype=np.int64)
    if fmt == "onnx":
        from exactmem.exporters.onnx_export import dataset_array, run_onnx

        _, got = run_onnx(target, dataset_array(ds, dtype))
        assert np.array_equal(got, labels)
    elif fmt == "safetensors":
        from exactmem.exporters.safetensors_io import verify_binding

        assert verify_binding(target, cert) == []
    else:
        import torch

        from exactmem.exporters.torch import load_network

        net = load_network(str(target))
        x = torch.tensor(ds.sequences, dtype=torch.int64)
        assert np.array_equal(net.labels(net(x)).numpy(), labels)
    # only the outputs remain: every temporary name was unpredictable and is gone
    made = {p.name for p in folder.iterdir() if not p.is_symlink()}
    assert made == ({out, f"{out}.exact.json"} if fmt == "safetensors" else {out})


def test_a_symlink_at_the_output_is_replaced_not_followed(certified: tuple[Path, Dataset],
                                                          tmp_path: Path) -> None:
    cert, _ = certified
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    for name in ("net.onnx", "data.json", "c2.json"):
        (tmp_path / name).symlink_to(victim)
    assert main(["export", str(cert), "--format", "onnx", "-o", str(tmp_path / "net.onnx")]) == 0
    assert main(["generate", "--N", "5", "--n", "3", "-o", str(tmp_path / "data.json")]) == 0
    assert main(["certify", str(tmp_path / "data.json"), "-c", "lookup", "-o",
                 str(tmp_path / "c2.json")]) == 0
    assert victim.read_text() == VICTIM_TEXT
    for name in ("net.onnx", "data.json", "c2.json"):
        assert not (tmp_path / name).is_symlink()


def test_precision_json_and_search_results_do_not_follow_symlinks(
        certified: tuple[Path, Dataset], tmp_path: Path) -> None:
    from exactmem.search.drive.results import RESULTS_FORMAT, ResultsFile

    cert, _ = certified
    victim = plant(tmp_path, ["p.json.tmp", "results.jsonl.tmp", ".p.json.tmp"])
    assert main(["precision", str(cert), "--no-search", "--json", str(tmp_path / "p.json"),
                 "-q"]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["N"] == 40
    # a results file whose last line was cut by a kill is rewritten without it
    results = tmp_path / "results.jsonl"
    head = json.dumps({"format": RESULTS_FORMAT, "header": {"q": 1}}, sort_keys=True)
    results.write_text(head + "\n" + '{"key": "cut')
    ResultsFile(results, {"q": 1})
    assert results.read_text() == head + "\n"
    assert victim.read_text() == VICTIM_TEXT


def test_atomic_writes_keep_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with atomic_path(target) as tmp:
        assert tmp.parent != tmp_path and tmp.exists() and not tmp.is_symlink()
        assert os.stat(tmp.parent).st_mode & 0o077 == 0  # a private folder
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    assert os.stat(target).st_mode & 0o777 == 0o640  # the replaced file's mode is kept
    write_bytes_atomic(target, b"bytes")
    assert target.read_bytes() == b"bytes"
    write_text_atomic(target, "text ü")
    assert target.read_text(encoding="utf-8") == "text ü"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_writes_refuse_unusable_targets(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="directory"):
        write_text_atomic(tmp_path, "x")
    with pytest.raises(OutputError, match="no such folder"):
        write_bytes_atomic(tmp_path / "missing" / "f", b"x")
    with pytest.raises(OutputError, match="no such folder"), \
            atomic_path(tmp_path / "missing" / "f"):
        pass


def test_search_proofs_and_results_lines_never_go_through_a_symlink(tmp_path: Path) -> None:
    """The CNF and LRAT files of an infeasible size replace a symlink planted at their names;
    a results file that is a symlink is refused, not appended through."""
    from exactmem.search.drive.results import ResultsFile

    data = tmp_path / "d.json"
    assert main(["generate", "--task", "next-token", "--N", "6", "--n", "2", "--vocab", "3",
                 "--classes", "3", "--seed", "1", "-o", str(data), "-q"]) == 0
    proofs = tmp_path / "P"
    proofs.mkdir()
    stem = "L1_H1_m1_s1_q0_res"
    victim = plant(proofs, [f"{stem}.cnf", f"{stem}.lrat"])
    main(["search", str(data), "--bits", "2", "--proofs", str(proofs), "--json", "-q"])
    assert victim.read_text() == VICTIM_TEXT
    assert not (proofs / f"{stem}.cnf").is_symlink()
    assert (proofs / f"{stem}.cnf").read_text().startswith("c encoder ")
    link = tmp_path / "results.jsonl"
    link.symlink_to(victim)
    store = ResultsFile(link, {"q": 1})  # not a results file: replaced, never followed
    store.add({"key": "k", "status": "found"})
    assert victim.read_text() == VICTIM_TEXT
    assert not link.is_symlink() and link.read_text().count("\n") == 2
