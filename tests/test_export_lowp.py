"""``exactmem export --dtype int8|bfloat16``: int8 / bfloat16 weight matrices in every format,
run in onnxruntime (the integer graph: ``MatMulInteger``, int32 accumulation) and torch;
a certificate without the claim is refused before anything is written."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exactmem.arith import ScaledMatrix
from exactmem.certificate import read_certificate, spec_from_certificate
from exactmem.cli import main
from exactmem.constructions.bounds import narrow_split, stored_split
from exactmem.model.spec import Affine, FeedForward, Linear, NetworkSpec, Readout

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("safetensors")

BF16 = "bfloat16-weights/float32"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("lowp")
    d = tmp / "d.json"
    assert main(["generate", "--N", "300", "--n", "12", "--vocab", "16", "--classes", "8",
                 "--seed", "4", "-o", str(d), "--quiet"]) == 0
    out = {}
    for con, claim in (("dense-int8", "int8"), ("dense-bf16", BF16)):
        out[claim] = tmp / f"{con}.json"
        assert main(["certify", str(d), "-c", con, "--float-exact", claim, "-o",
                     str(out[claim]), "-q"]) == 0
    return out


def _export(cert: Path, out: Path, fmt: str, dtype: str) -> int:
    return main(["export", str(cert), "--format", fmt, "--dtype", dtype, "-o", str(out),
                 "-q"])


@pytest.mark.parametrize("fmt", ["onnx", "torch", "safetensors"])
@pytest.mark.parametrize("dtype, claim", [("int8", "int8"), ("bfloat16", BF16)])
def test_export_writes_narrow_and_runs_it(certs: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str], fmt: str,
                                          dtype: str, claim: str) -> None:
    out = tmp_path / f"net.{fmt}"
    assert _export(certs[claim], out, fmt, dtype) == 0
    line = capsys.readouterr().out
    assert "memorized 1.0 (300/300)" in line and f"claim {claim}" in line
    spec = spec_from_certificate(read_certificate(str(certs[claim])))
    split = stored_split(spec, claim)
    if fmt == "onnx":
        import onnx

        model = onnx.load(str(out))
        kinds = {t.data_type for t in model.graph.initializer}
        ops = {n.op_type for n in model.graph.node}
        inits = {t.name: t for t in model.graph.initializer}
        made = {o: n for n in model.graph.node for o in n.output}
        # the embedding table: stored as info charges it, widened by a Cast
        table = made[next(n for n in model.graph.node if n.op_type == "Gather").input[0]]
        assert table.op_type == "Cast"
        stored = inits[table.input[0]].data_type
        if dtype == "int8":
            assert onnx.TensorProto.INT8 in kinds and "MatMulInteger" in ops
            assert "MatMul" not in ops and onnx.TensorProto.FLOAT not in kinds
            assert stored == onnx.TensorProto.INT16 and split["int16"] == sum(
                int(np.prod(t.dims)) for t in inits.values()
                if t.data_type == onnx.TensorProto.INT16)
        else:
            assert onnx.TensorProto.BFLOAT16 in kinds
            assert stored == onnx.TensorProto.BFLOAT16
            assert split["bfloat16"] > narrow_split(spec)[0]  # not the weights alone
    else:
        import torch

        if fmt == "torch":
            tensors = torch.load(str(out), weights_only=True)
        else:
            from safetensors.torch import load_file

            tensors = load_file(str(out))
        from exactmem.adapters.lowp import TORCH_DTYPES

        got: dict[Any, int] = {}
        for k, v in tensors.items():
            if k != "_extra_state":
                got[v.dtype] = got.get(v.dtype, 0) + v.numel()
        assert got == {TORCH_DTYPES[dt]: c for dt, c in split.items()}
        assert torch.int32 not in got if dtype == "int8" else torch.bfloat16 in got


@pytest.mark.parametrize("fmt", ["onnx", "torch", "safetensors"])
def test_a_certificate_without_the_claim_is_refused(certs: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    fmt: str) -> None:
    assert _export(certs[BF16], tmp_path / "a", fmt, "int8") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a certificate claiming int8" in err
    if fmt != "torch":  # torch bfloat16 without the claim: every tensor rounded (float path)
        assert _export(certs["int8"], tmp_path / "b", fmt, "bfloat16") == 2
        assert "claiming bfloat16-weights/float32" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_integer_graph_is_exact_on_negative_and_large_activations() -> None:
    """``MatMulInteger`` on the bytes of ``x = P - M``: every sign, every byte of an int32."""
    from exactmem.adapters.lowp_onnx import build_int8_model
    from exactmem.adapters.onnx_export import run_onnx
    from exactmem.errors import NotExactError

    rng = random.Random(7)
    w1 = [[rng.randint(-128, 127) for _ in range(5)] for _ in range(4)]
    w2 = [[rng.choice((-2, -1, 1, 2)) for _ in range(4)]]  # sums stay below 2^31
    b1 = [[rng.randint(-1000, 1000)] for _ in range(4)]
    spec = NetworkSpec(
        input_kind="vectors", input_dim=5, seq_len=2,
        layers=(Linear(Affine(ScaledMatrix(tuple(map(tuple, w1)), 1, 5),
                              ScaledMatrix(tuple(map(tuple, b1)), 1, 1))),
                FeedForward((Affine(ScaledMatrix(
                    tuple(tuple(int(i == j) for j in range(4)) for i in range(4)), 1, 4)),
                    Affine(ScaledMatrix(tuple(map(tuple, w2)), 1, 4))))),
        readout=Readout("scalar", "last"))
    x = np.array([[[rng.randint(-(1 << 18), 1 << 18) for _ in range(5)] for _ in range(2)]
                  for _ in range(64)], dtype=np.int64)
    h = x @ np.array(w1).T + np.array(b1).reshape(-1)
    want = np.maximum(h, 0) @ np.array(w2).T
    assert np.abs(h).max() >= 1 << 24 and (h < 0).any()  # every byte and sign in use
    assert (np.abs(x) @ np.abs(np.array(w1)).T).max() + 1000 < 1 << 31
    outs, labels = run_onnx(build_int8_model(spec), x.astype(np.int32))
    assert outs.dtype == np.int32 and (outs.astype(np.int64) == want).all()
    assert (labels == want[:, -1, 0]).all()
    bad = NetworkSpec(input_kind="vectors", input_dim=1, seq_len=1,
                      layers=(Linear(Affine(ScaledMatrix(((128,),), 1, 1))),))
    with pytest.raises(NotExactError, match="int8"):
        build_int8_model(bad)


def test_onnxruntime_int8_gets_every_label_of_the_dataset(certs: dict[str, Path]) -> None:
    from exactmem.adapters.lowp_onnx import build_int8_model
    from exactmem.adapters.onnx_export import dataset_array, run_onnx
    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )

    cert: Any = read_certificate(str(certs["int8"]))
    ds = dataset_from_certificate(cert, certs["int8"].parent)
    outs, labels = run_onnx(build_int8_model(spec_from_certificate(cert)),
                            dataset_array(ds, "int8"))
    assert outs.dtype == np.int32
    assert (outs[:, -1, 0] == np.array(ds.labels)).all() and (labels == ds.labels).all()
