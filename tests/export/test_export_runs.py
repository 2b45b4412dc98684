"""``exactmem export`` runs what it wrote in the file's own runtime: below a memorized
fraction of 1 nothing is written (exit 1, with what would hold) unless --allow-lossy; it
reads gzip certificates; ``exactmem precision`` has a row per runtime export targets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from token_data import token_dataset

from exactmem.cli import main
from exactmem.model.dataset import Dataset
from exactmem.pipeline import certify


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Certificates: KS25 (float breaks it), KS25 --max-bits 24 (float32-exact), and
    lookup on data where float32 breaks it in onnxruntime but float64 holds."""
    folder = tmp_path_factory.mktemp("certs")
    ks: Dataset = token_dataset(3, N=60, n=6, V=16, classes=5)
    out: dict[str, Path] = {}
    for name, con, opts, ds in (
            ("ks", "kajitsuka2025-next-token", {}, ks),
            ("ks24", "kajitsuka2025-next-token", {"max_bits": 24}, ks),
            ("lookup", "lookup", {}, token_dataset(3, N=200, n=6, V=16, classes=5))):
        path = folder / f"{name}.json"
        assert certify(ds, con, opts, out=path).report.verified
        out[name] = path
    return out


def export(cert: Path, out: Path, fmt: str, *extra: str) -> int:
    return main(["export", str(cert), "--format", fmt, "-o", str(out), "-q", *extra])


def test_lossy_onnx_is_not_written_and_says_what_holds(
        certs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ks.onnx"
    assert export(certs["ks"], out, "onnx") == 1
    said = capsys.readouterr().out
    assert said.startswith("not exported: the written file memorized 0.")
    assert "/60) in onnxruntime float64" in said and "--allow-lossy" in said
    assert "--max-bits 53" in said and "docs/float-ready.md" in said
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no temporary left
    assert export(certs["ks"], out, "onnx", "--allow-lossy") == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out} (onnx, float64)") and "in onnxruntime float64" in said
    assert "lossy" in said and "memorized 1.0" not in said
    assert out.is_file()


def test_float_ready_certificate_exports_and_runs_in_float32(
        certs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("onnx", "torch", "safetensors"):
        out = tmp_path / f"net.{fmt}"
        assert export(certs["ks24"], out, fmt, "--dtype", "float32") == 0
        runtime = "onnxruntime" if fmt == "onnx" else "torch"
        assert f"memorized 1.0 (60/60) in {runtime} float32" in capsys.readouterr().out
        assert out.is_file()


def test_a_wider_dtype_that_holds_is_named(certs: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert export(certs["lookup"], tmp_path / "l.onnx", "onnx", "--dtype", "float32") == 1
    said = capsys.readouterr().out
    assert "in onnxruntime float32" in said
    assert "--dtype float64 holds (memorized 1.0 (200/200) in onnxruntime float64)" in said
    assert export(certs["lookup"], tmp_path / "l.onnx", "onnx") == 0


@pytest.mark.parametrize("fmt,dtype", [("torch", "float16"), ("safetensors", "float16")])
def test_lossy_torch_and_safetensors_write_nothing(certs: dict[str, Path], tmp_path: Path,
                                                   fmt: str, dtype: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert export(certs["ks"], tmp_path / "x.bin", fmt, "--dtype", dtype) == 1
    assert f"in torch {dtype}" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # neither the file nor a safetensors sidecar


def test_gzip_certificates_export_like_plain_ones(certs: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    gz = tmp_path / "ks24.json.gz"
    gz.write_bytes(gzip.compress(certs["ks24"].read_bytes()))
    for fmt in ("onnx", "torch", "safetensors"):
        out = tmp_path / f"g.{fmt}"
        assert export(gz, out, fmt, "--dtype", "float32") == 0, capsys.readouterr()
        assert "memorized 1.0" in capsys.readouterr().out
    from exactmem.exporters.safetensors_io import verify_binding

    assert verify_binding(tmp_path / "g.safetensors", gz) == []


def test_unusable_dtype_is_refused_before_writing(certs: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert export(certs["ks24"], tmp_path / "b.onnx", "onnx", "--dtype", "bfloat16") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "float64, float32" in err
    assert list(tmp_path.iterdir()) == []


def test_precision_has_a_row_per_runtime(certs: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "p.json"
    assert main(["precision", str(certs["lookup"]), "--no-search", "--json", str(js),
                 "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["dtype", "runtime"]
    rows = {(r["runtime"], r["dtype"]): r["memorized"]
            for r in json.loads(js.read_text())["rows"]}
    assert set(rows) == {("torch", "float64"), ("torch", "float32"), ("torch", "bfloat16"),
                         ("torch", "float16"), ("onnxruntime", "float64"),
                         ("onnxruntime", "float32")}
    assert rows["onnxruntime", "float64"] == 1.0 and rows["onnxruntime", "float32"] < 1.0
    assert any(line.startswith("float32   onnxruntime") for line in lines)


def test_loading_the_runtimes_is_announced(certs: dict[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A progress stage is open while torch and onnxruntime load (unless --quiet)."""
    from exactmem import progress

    opened: list[str] = []
    real = progress.stage

    def stage(description: str) -> progress.Task:
        opened.append(description)
        return real(description)

    monkeypatch.setattr(progress, "stage", stage)
    for fmt in ("torch", "onnx"):
        assert export(certs["ks24"], tmp_path / f"n.{fmt}", fmt, "--dtype", "float32") == 0
    assert "loading torch" in opened and "loading onnxruntime" in opened
