"""The public Python API: docs/api.md's example runs, results print usefully, imports stay lazy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import exactmem
from exactmem.errors import CertificateError, ExactmemError, UnknownConstructionError
from exactmem.model.dataset import Dataset

DOCS = Path(__file__).resolve().parents[2] / "docs"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with d.json (N = 12) and its lookup certificate c.json."""
    folder = tmp_path_factory.mktemp("api")
    exactmem.generate(N=12, n=4, vocab=5, classes=3, seed=3, output=folder / "d.json")
    assert exactmem.certify(folder / "d.json", "lookup", output=folder / "c.json").verified
    return folder


def test_the_api_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    block = python_blocks("api.md")[-1]  # the page's "Example" section
    exec(compile(block, "docs/api.md", "exec"), {"__name__": "docs_api"})
    out = capsys.readouterr().out
    assert "certified lookup on 50 sequences -> c.json" in out
    assert "certified imported-model on 50 sequences -> c2.json" in out
    assert out.rstrip().splitlines()[-1] == "False (23,)"
    assert (tmp_path / "c2.json").exists() and not (tmp_path / "c3.json").exists()


def test_every_verb_is_a_function_of_the_package() -> None:
    for name in ("generate", "certify", "check", "info", "export", "precision", "search",
                 "save_dataset", "load_dataset", "certify_model"):
        assert callable(getattr(exactmem, name)), name
        assert name in exactmem.__all__


def test_import_exactmem_loads_no_torch_z3_or_onnx() -> None:
    code = ("import sys, exactmem; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'z3', 'onnx', 'onnxruntime', 'safetensors', 'matplotlib')]; "
            "print(heavy)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_search_stays_the_function_after_the_subpackage_is_imported() -> None:
    import exactmem.search.drive.sweep  # noqa: F401

    assert callable(exactmem.search)
    code = ("import exactmem, exactmem.search.drive.sweep, exactmem.search.drive.query; "
            "from exactmem.search import minimize; print(callable(exactmem.search))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr


def test_generate_returns_a_dataset_and_the_files_round_trip(tmp_path: Path) -> None:
    ds = exactmem.generate(N=9, n=3, vocab=4, classes=2, seed=5)
    assert isinstance(ds, Dataset) and (ds.N, ds.n) == (9, 3)
    exactmem.save_dataset(ds, tmp_path / "d.json")
    assert exactmem.load_dataset(tmp_path / "d.json") == ds
    vec = exactmem.generate(N=5, n=2, vocab=4, classes=2, dim=2, output=tmp_path / "v.json")
    assert vec.inputs == "vectors" and exactmem.load_dataset(tmp_path / "v.json") == vec
    att = exactmem.generate(for_construction="mahdavi2024-mha", seed=1, heads=2)
    assert att.inputs == "vectors" and exactmem.certify(att, "mahdavi2024-mha", heads=2).verified
    with pytest.raises(ExactmemError, match="task"):
        exactmem.generate("next-tok")
    with pytest.raises(ExactmemError, match="apply only with for_construction"):
        exactmem.generate(heads=2)


def test_certify_result_and_its_repr(made: Path, tmp_path: Path) -> None:
    res = exactmem.certify(made / "d.json", "lookup", output=tmp_path / "c.json", seed=1)
    assert res and res.verified and res.path == tmp_path / "c.json"
    assert res.N == 12 and res.sizes.params_nonzero > 0 and res.check.verified
    assert res.certificate is not None and "certificate" not in repr(res)
    assert repr(res).startswith("CertifyResult(verified, lookup, N = 12 -> ")
    assert str(res).startswith("certified lookup on 12 sequences -> ")
    without = exactmem.certify(exactmem.load_dataset(made / "d.json"), "lookup")
    assert without.verified and without.path is None
    with pytest.raises(UnknownConstructionError):
        exactmem.certify(made / "d.json", "no-such")
    with pytest.raises(ExactmemError, match="do not apply to lookup"):
        exactmem.certify(made / "d.json", "lookup", block_points=2)


def test_certify_binds_the_dataset_file(made: Path) -> None:
    res = exactmem.certify(made / "d.json", "lookup", output=made / "bound.json",
                           bind_dataset=True)
    assert res.verified and "path" in json.loads((made / "bound.json").read_text())["dataset"]
    assert exactmem.check(made / "bound.json").verified
    with pytest.raises(ExactmemError, match="file path"):
        exactmem.certify(exactmem.load_dataset(made / "d.json"), "lookup", bind_dataset=True)


def test_check_verified_rejected_and_unusable(made: Path, tmp_path: Path) -> None:
    ok = exactmem.check(made / "c.json")
    assert ok and ok.exit_code == 0 and ok.verdict == "verified" and ok.claim
    assert repr(ok) == f"CheckResult(verified {made / 'c.json'})"
    cert = json.loads((made / "c.json").read_text())
    cert["claims"]["outputs"][0] = ["7"]
    bad = exactmem.check(cert)
    assert not bad and bad.exit_code == 1 and bad.verdict == "rejected"
    assert "failures (first: " in repr(bad) and len(bad.failures) >= 2
    assert str(bad).startswith("rejected\n  ")
    (tmp_path / "junk.json").write_text("{")
    junk = exactmem.check(tmp_path / "junk.json")
    assert junk.unusable and junk.exit_code == 2 and junk.verdict == "unusable"
    assert exactmem.check(made / "c.json", shards=2).verified
    with pytest.raises(ExactmemError, match="positive"):
        exactmem.check(made / "c.json", shards=0)


def test_info_matches_the_cli_json(made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.cli import main

    res = exactmem.info(made / "c.json")
    assert main(["info", str(made / "c.json"), "--json"]) == 0
    assert res.as_dict() == json.loads(capsys.readouterr().out)
    assert res.construction == "lookup" and res.N == 12
    assert str(res).splitlines()[0] == "construction    lookup"
    assert repr(res).startswith("InfoResult(lookup, N = 12, n = 4, params nonzero ")


def test_export_writes_each_format(made: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    pt = exactmem.export(made / "c.json", tmp_path / "m.pt")
    assert pt.path.exists() and (pt.format, pt.dtype, pt.rounded, pt.overflowed) == \
        ("torch", "float64", 0, 0) and pt.weights > 0
    st = exactmem.export(made / "c.json", tmp_path / "m.safetensors", "safetensors", "float32")
    assert st.sidecar is not None and st.sidecar.exists()
    assert str(st).startswith(f"wrote {tmp_path / 'm.safetensors'} (safetensors, float32): ")
    cert = json.loads((made / "c.json").read_text())
    cert["claims"]["outputs"][0] = ["7"]
    with pytest.raises(CertificateError, match="not exported"):
        exactmem.export(cert, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    with pytest.raises(ExactmemError, match="format"):
        exactmem.export(made / "c.json", tmp_path / "x.bin", "pickle")


def test_precision_rows_and_bits(made: Path) -> None:
    pytest.importorskip("torch")
    res = exactmem.precision(made / "c.json", search=False, bits=53)
    assert [r.dtype for r in res.rows] == ["float64", "float32", "bfloat16", "float16"]
    assert res.rows[0].memorized == 1.0 and res.bits_certified is True
    assert "53 bits certified" in repr(res) and str(res).splitlines()[-1].startswith("53 bits")


def test_search_finds_xor(tmp_path: Path) -> None:
    pytest.importorskip("z3")
    pts = [(0, 0), (1, 0), (0, 1), (1, 1)]
    xor = Dataset("next-token", "vectors",
                  tuple(((Fraction(a), Fraction(b)),) for a, b in pts), (0, 1, 1, 0), dim=2)
    res = exactmem.search(xor, readout="scalar", minimize="ff-width", max_ff_width=2,
                          timeout=60, certificates=tmp_path)
    assert res and res.status == "found" and res.minimal is not None
    assert res.minimal["ff_width"] == 1 and res.proved_minimal
    assert repr(res).startswith("SearchResult(found, minimal ")
    one = exactmem.search(xor, readout="scalar", ff_width=1, timeout=60)
    assert one.status == "found" and len(one.shapes) == 1


@pytest.fixture(scope="module")
def gpt2_made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random GPT-2 checkpoint ``m/`` and 4 of its self-labelled sequences ``d.json``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled

    folder = tmp_path_factory.mktemp("api_lm")
    random_gpt2(folder / "m", seed=0)
    exactmem.save_dataset(self_labelled(folder / "m", 4, 16, seed=0), folder / "d.json")
    return folder


def test_certify_model_reads_every_kind_the_verb_reads(gpt2_made: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPT-2 directory is a model like a file: ``partial`` applies, per-position arrays
    come back, and info / export accept its certificate as the CLI does."""
    monkeypatch.chdir(gpt2_made)
    res = exactmem.certify_model("m", "d.json", partial=True, output="c.json")
    assert res.certified.shape == (4, 16) and int(res.certified.sum()) == res.proved > 0
    assert res.written and (gpt2_made / "c.json").exists()
    assert exactmem.check("c.json").verified
    info = exactmem.info("c.json")
    assert info.as_dict()["certified_positions"] == res.proved
    assert info.as_dict() == exactmem.info(json.loads((gpt2_made / "c.json").read_text())
                                           ).as_dict()
    assert str(info).splitlines()[0].split() == ["certified_positions", str(res.proved)]
    pytest.importorskip("safetensors")
    out = exactmem.export("c.json", "lm.safetensors", "safetensors", "float32")
    assert out.path.exists() and out.format == "safetensors"
    assert str(out).startswith("wrote lm.safetensors (safetensors, float32); ")
    with pytest.raises(ExactmemError, match="float64 or float32"):
        exactmem.export("c.json", "lm16.safetensors", "safetensors", "float16")


def test_certify_model_partial_needs_a_language_model(made: Path) -> None:
    with pytest.raises(ExactmemError, match="only for language-model checkpoints"):
        exactmem.certify_model(made / "c.json", made / "d.json", partial=True)


def test_lm_info_text_shows_the_bits() -> None:
    """``exactmem info`` without ``--json`` shows a language model's bit figures too."""
    figures = {"certified_positions": 3, "positions": 8, "N": 2, "n": 4,
               "certified_memorized_bits": "12.5", "float_memorized_bits": 13.0,
               "certified_bits_per_param": "0.01", "layers": 1}
    text = str(exactmem.LMInfoResult(figures, ("certified_positions", "positions", "N", "n",
                                                "layers")))
    keys = [line.split()[0] for line in text.splitlines()]
    assert keys == ["certified_positions", "positions", "N", "n", "layers",
                    "certified_bits_per_param", "certified_memorized_bits",
                    "float_memorized_bits"]
