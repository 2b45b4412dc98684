"""The int8- and bfloat16-weight memorizers: certified with their claims (docs/float-exact.md),
every label in torch with the tensors stored in int8 / bfloat16, a weight beyond the format
rejected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from exactmem.certificate import spec_from_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.checker.floatexact import INT32, NotExact, _affine_rows, _weight
from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.model.sizes import sizes
from exactmem.pipeline import certify

BF16 = "bfloat16-weights/float32"


@pytest.fixture(scope="module")
def ds() -> Any:
    return generate(task="next-token", N=300, n=12, vocab=16, classes=8, seed=4)


@pytest.fixture(scope="module")
def certs(ds: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for con, claim in (("dense-int8", "int8"), ("dense-bf16", BF16)):
        res = certify(ds, con, {"seed": 1})  # the construction claims its format by default
        assert res.report.verified, res.report.failures[:3]
        out[claim] = res.certificate
    return out


def _words(cert: dict[str, Any]) -> list[list[str]]:
    """The word matrix (third map) of the first lookup block (features, one-hot, words,
    sum, output)."""
    ff = next(la for la in cert["network"]["layers"]
              if la["type"] == "feedforward" and len(la["maps"]) == 5)
    return ff["maps"][2]["weight"]


@pytest.mark.parametrize("claim, text", [("int8", "exact in int8"),
                                         (BF16, "exact with bfloat16-weights/float32")])
def test_certified_with_the_claim(certs: dict[str, dict[str, Any]], claim: str,
                                  text: str) -> None:
    cert = certs[claim]
    assert cert["claims"]["float_exact"] == [claim]
    report = check_certificate(cert)
    assert report.verified and text in report.claim
    gate = 64 if claim == "int8" else 512  # words below the gate 2^word_bits
    assert max(abs(int(x)) for row in _words(cert) for x in row) == gate


@pytest.mark.parametrize("claim, value", [("int8", 128), (BF16, 257)])
def test_a_weight_beyond_the_format_is_rejected(certs: dict[str, dict[str, Any]], claim: str,
                                                value: int) -> None:
    bad = copy.deepcopy(certs[claim])
    words = _words(bad)
    words[0][0] = str(value)  # 128: not int8; 257: nine significant bits, not bfloat16
    bad["sizes"] = sizes(spec_from_certificate(bad)).as_dict()
    bad["digest"] = digest_of(bad)
    report = check_certificate(bad)
    assert not report.verified
    assert any(f"float_exact: not exact in {claim}" in f for f in report.failures)


def test_the_float32_network_is_not_int8(ds: Any) -> None:
    res = certify(ds, "dense-float32", {"seed": 1}, float_exact=["int8"])
    assert "float_exact" not in res.certificate["claims"]


def test_int8_rule_bounds() -> None:
    fmt = (*INT32, "int8")
    for ok in (-128, 127, 0):
        _weight(ok, 1, fmt, "w")
    for bad, den in ((128, 1), (-129, 1), (1, 2)):
        with pytest.raises(NotExact, match="int8"):
            _weight(bad, den, fmt, "w")
    one = (((2,),), 1)
    zero = (((0,),), 1)
    _affine_rows(one, zero, [[(1 << 30) - 1]], 1, fmt, "x")  # 2^31 - 2: an int32 sum
    with pytest.raises(NotExact, match="exceeds"):
        _affine_rows(one, zero, [[1 << 30]], 1, fmt, "x")  # 2^31 overflows int32
    with pytest.raises(NotExact, match="not an integer"):
        _affine_rows(one, zero, [[1]], 2, fmt, "x")  # a half: not on the integer grid


@pytest.mark.parametrize("con, claim", [("dense-int8", "int8"), ("dense-bf16", BF16)])
def test_stored_narrow_and_every_label_in_torch(ds: Any, tmp_path: Path, con: str,
                                                claim: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    from exactmem.exporters.lowp import is_weight, run_lowp, save_lowp, widen
    from exactmem.exporters.skeleton import named_matrices, skeleton
    from exactmem.exporters.torch import ExactmemNetwork, dataset_tensor

    spec = get(con).build(ds, {"seed": 1}).spec
    path = tmp_path / "net.safetensors"
    save_lowp(spec, claim, path)
    tensors = load_file(str(path))
    narrow, wide = (torch.int8, torch.int32) if claim == "int8" else (torch.bfloat16,
                                                                      torch.float32)
    others = set()
    for name, _, is_vec in named_matrices(spec):
        if is_weight(name, is_vec):
            assert tensors[name].dtype == narrow
        else:
            others.add(tensors[name].dtype)
    assert others - {wide}  # biases and tables stored narrower than the activations
    run = run_lowp(spec, ds, claim, path)
    assert run.memorized == run.total == ds.N
    net = ExactmemNetwork(skeleton(spec), widen(tensors, claim))
    out = net(dataset_tensor(ds, wide, "cpu")[:4])
    assert out.dtype == wide  # integer arithmetic throughout for int8


def test_lowp_refuses_values_beyond_the_dtype(ds: Any) -> None:
    pytest.importorskip("torch")
    from exactmem.errors import NotExactError
    from exactmem.exporters.lowp import lowp_tensors

    spec = get("dense-float32").build(ds, {"seed": 1}).spec
    with pytest.raises(NotExactError, match="int8"):
        lowp_tensors(spec, "int8")
    with pytest.raises(NotExactError, match="bfloat16"):
        lowp_tensors(spec, BF16)


def test_cli_certifies_int8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.cli import main

    d = tmp_path / "d.json"
    assert main(["generate", "--N", "60", "--n", "12", "--vocab", "16", "--classes", "4",
                 "-o", str(d), "--quiet"]) == 0
    assert main(["certify", str(d), "-c", "dense-int8", "--float-exact", "int8",
                 "-o", str(tmp_path / "c.json"), "-q"]) == 0
    assert main(["check", str(tmp_path / "c.json")]) == 0
    assert "int8" in capsys.readouterr().out


def test_onnxruntime_bf16_initializers_get_every_label(ds: Any) -> None:
    pytest.importorskip("onnxruntime")
    import numpy as np
    from onnx import TensorProto

    from exactmem.errors import NotExactError
    from exactmem.exporters.lowp_onnx import build_bf16_model
    from exactmem.exporters.onnx_export import dataset_array, run_onnx

    model = build_bf16_model(get("dense-bf16").build(ds, {"seed": 1}).spec)
    kinds = {t.data_type for t in model.graph.initializer if t.name.endswith(".bf16")}
    assert kinds == {TensorProto.BFLOAT16}
    outs, labels = run_onnx(model, dataset_array(ds, "float32"))
    assert outs.dtype == np.float32
    assert (outs[:, -1, 0].astype(np.float64) == np.array(ds.labels)).all()
    assert (labels == np.array(ds.labels)).all()
    with pytest.raises(NotExactError, match="bfloat16"):
        build_bf16_model(get("dense-float32").build(ds, {"seed": 1}).spec)
