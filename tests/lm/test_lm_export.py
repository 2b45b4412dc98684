"""``exactmem export`` of language-model certificates (docs/trained-models.md, "Exporting a
certified language model"): a GPT-2 (pre-LN, GELU tanh, tied head), a post-LN ReLU encoder
stack without a final norm (untied head) and an RMSNorm stack with GELU erf, certified with
``certify-model --partial`` on 16 sequences, exported to ONNX, torch and safetensors; the
files' logits against the float64 forward pass of the certificate's weights; tampering,
lossy files, symlinks and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("safetensors")

from lm_models import redigest  # noqa: E402

from exactmem.cli import main  # noqa: E402
from exactmem.lm import exporting as lm_export  # noqa: E402
from exactmem.lm import onnx_graph as lm_onnx  # noqa: E402
from exactmem.lm.certfile import spec_from_lm_certificate  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_encoder, self_labelled_encoder  # noqa: E402
from exactmem.lm.float64 import logits64  # noqa: E402
from exactmem.lm.torchrun import torch_logits  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402

MODELS = ("gpt2", "post_relu", "rms_erf")
FORMATS = ("onnx", "torch", "safetensors")
RUNTIME = {"onnx": "onnxruntime", "torch": "torch", "safetensors": "torch"}


def run(*args: object) -> int:
    return main([str(a) for a in args])


def _model(folder: Path, name: str) -> Path:
    if name == "gpt2":
        pytest.importorskip("transformers")
        from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled

        path = random_gpt2(folder / "gpt2", seed=0)
        save_dataset(self_labelled(path, 16, 16, seed=0), folder / "d_gpt2.json")
        return path
    kw: dict[str, Any] = ({"norm_first": False, "activation": "relu", "final_norm": False}
                          if name == "post_relu" else {"norm": "rmsnorm", "eps": None})
    path = random_encoder(folder / f"{name}.pt", seed=7, **kw)
    save_dataset(self_labelled_encoder(path, 16, 16, seed=7), folder / f"d_{name}.json")
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per model: its certificate ``c_NAME.json`` (dataset embedded)."""
    folder = tmp_path_factory.mktemp("lmexp")
    out = {}
    for name in MODELS:
        model = _model(folder, name)
        assert run("certify-model", model, folder / f"d_{name}.json", "-o",
                   folder / f"c_{name}.json", "--partial", "-q") == 0
        out[name] = folder / f"c_{name}.json"
    return out


def _cert(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _tokens(cert: dict[str, Any]) -> np.ndarray:
    return np.array(cert["dataset"]["data"]["sequences"], dtype=np.int64)


def _reload(fmt: str, path: Path, tokens: np.ndarray) -> np.ndarray:
    """The written file's logits, read back by its own library (not by the exporter)."""
    if fmt == "onnx":
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits, labels = sess.run(["logits", "labels"], {"tokens": tokens})
        assert np.array_equal(labels, logits.argmax(-1))
        return np.asarray(logits, dtype=np.float64)
    return torch_logits(*lm_export.read_file(fmt, path), tokens)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", MODELS)
def test_the_file_computes_the_certified_function(certs: dict[str, Path], tmp_path: Path,
                                                  name: str, fmt: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cert = _cert(certs[name])
    claimed = sum(map(len, cert["claims"]["positions"]))
    out = tmp_path / f"m.{fmt}"
    assert run("export", certs[name], "--format", fmt, "-o", out) == 0
    line = capsys.readouterr().out
    assert (f"float64 in {RUNTIME[fmt]}: the label is the unique argmax at {claimed} of "
            f"{claimed} certified positions") in line
    spec = spec_from_lm_certificate(cert)
    want = logits64(spec, _tokens(cert))
    got = _reload(fmt, out, _tokens(cert))
    assert got.shape == want.shape == (16, 16, spec.vocab_size)
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_the_files_carry_the_config_and_the_stored_tensors(certs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    from safetensors import safe_open

    spec = spec_from_lm_certificate(_cert(certs["post_relu"]))
    cfg = lm_export.config(spec)
    assert cfg["norm_first"] is False and cfg["final_norm"] is False and cfg["norm"] == \
        "layernorm" and cfg["tied_head"] is False and cfg["activation"] == "relu"
    for fmt in ("safetensors", "torch"):
        assert run("export", certs["post_relu"], "-f", fmt, "--dtype", "float32", "-o",
                   tmp_path / f"m.{fmt}", "--no-check") == 0
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as fh:
        assert json.loads(fh.metadata()["exactmem.config"]) == cfg
        assert sorted(fh.keys()) == sorted(spec.tensors)
        head = fh.get_tensor("head")
    assert head.dtype == np.float32 and np.array_equal(head, spec.tensors["head"]
                                                       .astype(np.float32))
    saved = torch.load(str(tmp_path / "m.torch"), weights_only=True)
    assert saved["config"] == cfg and set(saved["state_dict"]) == set(spec.tensors)
    assert saved["state_dict"]["wte"].dtype == torch.float32


def test_onnx_graphs_name_the_forms_of_their_layers(certs: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """GELU erf is the Erf op in float32 (onnxruntime has none in float64: the series); GELU
    tanh carries 0.044715; a LayerNorm's eps is the stored float64 in a float64 graph."""
    def ops(name: str, dtype: str) -> tuple[set[str], list[np.ndarray]]:
        model = lm_onnx.build_onnx(spec_from_lm_certificate(_cert(certs[name])), dtype)
        return ({n.op_type for n in model.graph.node},
                [onnx.numpy_helper.to_array(t) for t in model.graph.initializer])

    kinds, _ = ops("rms_erf", "float32")
    assert "Erf" in kinds and "LayerNormalization" not in kinds
    kinds, _ = ops("rms_erf", "float64")
    assert "Erf" not in kinds and "Exp" in kinds
    kinds, consts = ops("gpt2", "float64")
    assert "Tanh" in kinds and "Where" in kinds and "Softmax" in kinds
    scalars = {float(c) for c in consts if c.ndim == 0}
    assert {0.044715, np.sqrt(2 / np.pi), 1e-5, np.sqrt(16.0)} <= scalars


@pytest.mark.parametrize("name", MODELS)
def test_float32_graphs_keep_the_certified_labels(certs: dict[str, Path], tmp_path: Path,
                                                  name: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cert = _cert(certs[name])
    claimed = sum(map(len, cert["claims"]["positions"]))
    assert run("export", certs[name], "-f", "onnx", "--dtype", "float32", "-o",
               tmp_path / "m.onnx") == 0
    assert (f"float32 in onnxruntime: the label is the unique argmax at {claimed} of "
            f"{claimed} certified positions") in capsys.readouterr().out
    got = _reload("onnx", tmp_path / "m.onnx", _tokens(cert))
    want = logits64(spec_from_lm_certificate(cert), _tokens(cert))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_a_dataset_bound_by_path_is_read(certs: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cert = _cert(certs["post_relu"])
    bound = dict(cert, dataset={"sha256": cert["dataset"]["sha256"], "path": "d_post_relu.json"})
    path = certs["post_relu"].with_name("bound.json")
    path.write_text(json.dumps(redigest(bound)))
    assert run("export", path, "-f", "torch", "-o", tmp_path / "m.pt") == 0
    assert "(256 of 256 positions in the file's dataset" in capsys.readouterr().out


def _tampered(path: Path, digest: bool) -> dict[str, Any]:
    """The certificate with 64 added to one coordinate of the final norm's bias (labels
    change); re-digested when ``digest``."""
    cert = _cert(path)
    bias = cert["model"]["tensors"]["lnf.bias"]
    bias["values"][5] = str(int(bias["values"][5]) + (64 << bias["scale"]))
    return redigest(cert) if digest else cert


@pytest.mark.parametrize("digest", [False, True])
def test_a_tampered_certificate_is_refused_and_nothing_written(
        certs: dict[str, Path], tmp_path: Path, digest: bool,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_tampered(certs["gpt2"], digest)))
    assert run("export", bad, "-f", "onnx", "-o", tmp_path / "m.onnx") == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == f"not exported: the checker rejects {bad}"
    assert ("digest" if not digest else "label") in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_a_file_that_loses_certified_positions_is_written_only_when_allowed(
        certs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_tampered(certs["gpt2"], True)))
    out = tmp_path / "m.safetensors"
    assert run("export", bad, "-f", "safetensors", "-o", out, "--no-check") == 1
    line = capsys.readouterr().out
    made = re.search(r"not exported: float64 in torch: the label is the unique argmax at (\d+) "
                     r"of (\d+) certified positions", line)
    assert made is not None and int(made[1]) < int(made[2])
    assert not out.exists()
    assert run("export", bad, "-f", "safetensors", "-o", out, "--no-check",
               "--allow-lossy") == 0
    assert "(lossy: written because of --allow-lossy)" in capsys.readouterr().out
    assert out.is_file()


def test_a_symlink_at_the_output_is_replaced_not_followed(certs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "m.onnx"
    link.symlink_to(victim)
    assert run("export", certs["post_relu"], "-f", "onnx", "-o", link) == 0
    assert victim.read_text() == "keep me"
    assert link.is_file() and not link.is_symlink()


def test_bad_input_is_one_line_exit_2_and_nothing_written(
        certs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    cert = _cert(certs["post_relu"])
    assert run("export", certs["post_relu"], "-f", "torch", "--dtype", "float16", "-o",
               out) == 2
    bound = dict(cert, dataset={"sha256": cert["dataset"]["sha256"], "path": "gone.json"})
    (tmp_path / "bound.json").write_text(json.dumps(redigest(bound)))
    assert run("export", tmp_path / "bound.json", "-f", "onnx", "-o", out) == 2
    assert run("export", tmp_path / "bound.json", "-f", "onnx", "-o", out, "--no-check") == 2
    broken = json.loads(json.dumps(cert))
    del broken["model"]["tensors"]["wte"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert run("export", tmp_path / "broken.json", "-f", "onnx", "-o", out, "--no-check") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [ln for ln in err if "error" in ln] and not any("Traceback" in ln for ln in err)
    assert "float64 or float32, found --dtype float16" in err[0]
    assert not out.exists()
