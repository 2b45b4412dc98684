"""``exactmem export --dtype int8|bfloat16``: int8 / bfloat16 weight matrices in every format,
run in onnxruntime (the integer graph: ``MatMulInteger``, int32 accumulation) and torch;
a certificate without the claim is refused before anything is written."""

from __future__ import annotations

import random
from fractions import Fraction
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
        from exactmem.exporters.lowp import TORCH_DTYPES

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


def _crafted_spec(w1: list[list[int]], b1: list[list[int]], w2: list[list[int]]) -> NetworkSpec:
    """``x -> W2 relu(W1 x + b1)`` on vector inputs, scalar readout at the last position."""
    def mat(rows: list[list[int]]) -> ScaledMatrix:
        return ScaledMatrix(tuple(map(tuple, rows)), 1, len(rows[0]))

    d = len(w1)
    return NetworkSpec(
        input_kind="vectors", input_dim=len(w1[0]), seq_len=2,
        layers=(Linear(Affine(mat(w1), mat(b1))),
                FeedForward((Affine(mat([[int(i == j) for j in range(d)] for i in range(d)])),
                             Affine(mat(w2))))),
        readout=Readout("scalar", "last"))


def _worst_case() -> tuple[NetworkSpec, np.ndarray, np.ndarray]:
    """A network and inputs that put the largest limb against the largest int8 weight of the
    same sign in adjacent pairs: full bytes (255) would add two products to 65,280, past int16;
    every sign, every byte of an int32 in use.  Returns the spec, inputs and exact outputs."""
    rng = random.Random(7)
    w1 = [[-128] * 5, [127] * 5, [-128, 127, -128, 127, -128]] + \
        [[rng.randint(-128, 127) for _ in range(5)]]
    w2 = [[rng.choice((-2, -1, 1, 2)) for _ in range(4)]]
    b1 = [[rng.randint(-1000, 1000)] for _ in range(4)]
    tops = [(1 << 14) - 1, (1 << 16) - 1]  # 7-bit limbs all 127; bytes all 255
    x = np.array([[[rng.choice(tops) * rng.choice((1, -1, 1)) for _ in range(5)]
                   for _ in range(2)] for _ in range(64)], dtype=np.int64)
    x[0] = tops[1]  # a sequence of all-255 bytes, all positive
    h = x @ np.array(w1).T + np.array(b1).reshape(-1)
    want = np.maximum(h, 0) @ np.array(w2).T
    assert np.abs(h).max() >= 1 << 24 and (h < 0).any()
    # the int8 claim's bound on both layers' sums
    assert (np.abs(x) @ np.abs(np.array(w1)).T).max() + 1000 < 1 << 31
    assert (np.abs(h) @ np.abs(np.array(w2)).T).max() < 1 << 31
    return _crafted_spec(w1, b1, w2), x, want


@pytest.mark.parametrize("kernel, offset", [("pairs", 0), ("pairs", 1), ("quads", 0)])
def test_the_integer_graph_is_exact_under_every_kernel_model(kernel: str, offset: int) -> None:
    """The exported graph on the worst-case limbs, its ``MatMulInteger`` run by a model of the
    saturating int16 pair kernel (AVX2) and of the 4-product int32 kernel (VNNI, Arm dot):
    exact, on whatever CPU runs the test; and by onnxruntime on this CPU."""
    from int_kernels import run_with_kernel

    from exactmem.exporters.lowp_onnx import PAIR_BOUND, build_int8_model
    from exactmem.exporters.onnx_export import run_onnx

    spec, x, want = _worst_case()
    model = build_int8_model(spec)
    outs, labels, largest = run_with_kernel(model, x.astype(np.int32), kernel, offset)
    assert largest == 127 and 2 * largest * 128 == PAIR_BOUND < 1 << 15
    assert outs.dtype == np.int32 and (outs.astype(np.int64) == want).all()
    assert (labels == want[:, -1, 0]).all()
    outs, labels = run_onnx(model, x.astype(np.int32))
    assert (outs.astype(np.int64) == want).all() and (labels == want[:, -1, 0]).all()


def test_full_bytes_would_saturate_the_pair_kernel() -> None:
    """The same graph with 8-bit limbs (what the export wrote before): the pair kernel model
    returns wrong outputs on the worst case -- the test above exercises saturation -- while the
    4-product model is still exact."""
    from int_kernels import run_with_kernel

    from exactmem.exporters.lowp_onnx import build_int8_model

    spec, x, want = _worst_case()
    model = build_int8_model(spec, limb_bits=8)
    outs, _, largest = run_with_kernel(model, x.astype(np.int32), "pairs")
    assert largest == 255 and (outs.astype(np.int64) != want).any()
    outs, _, _ = run_with_kernel(model, x.astype(np.int32), "quads")
    assert (outs.astype(np.int64) == want).all()


def test_a_weight_outside_int8_is_refused() -> None:
    from exactmem.errors import NotExactError
    from exactmem.exporters.lowp_onnx import build_int8_model

    bad = NetworkSpec(input_kind="vectors", input_dim=1, seq_len=1,
                      layers=(Linear(Affine(ScaledMatrix(((128,),), 1, 1))),))
    with pytest.raises(NotExactError, match="int8"):
        build_int8_model(bad)


def test_a_crafted_worst_case_certificate_checks_and_exports_exactly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A certificate claiming int8 whose activation bytes would saturate a 16-bit pair sum:
    the checker states the integer execution model, and the exported file is built so that
    no pair can saturate (run under the pair-kernel model and onnxruntime: every label)."""
    import onnx
    from int_kernels import run_with_kernel

    from exactmem.certificate import build_certificate, write_certificate
    from exactmem.certificate.build import claim_float_exact
    from exactmem.constructions.base import BuildResult
    from exactmem.exporters.lowp_onnx import build_int8_model
    from exactmem.model.dataset import Dataset

    spec, x, want = _worst_case()
    keep = want[:, -1, 0] >= 0  # scalar labels are non-negative
    x, want = x[keep], want[keep]
    full_bytes = build_int8_model(spec, limb_bits=8)  # what the export wrote before
    assert (run_with_kernel(full_bytes, x.astype(np.int32))[1] != want[:, -1, 0]).any()
    ds = Dataset(task="next-token", inputs="vectors",
                 sequences=tuple(tuple(tuple(Fraction(int(v)) for v in tok) for tok in seq)
                                 for seq in x),
                 labels=tuple(int(v) for v in want[:, -1, 0]), dim=5)
    cert = build_certificate(ds, BuildResult(spec, {}), "crafted")
    assert claim_float_exact(cert, ["int8"]) == ["int8"]
    path = tmp_path / "c.json"
    write_certificate(cert, path)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "s VERIFIED" in out and "7-bit limbs" in out and "saturating int16" in out
    onnx_path = tmp_path / "c.onnx"
    assert _export(path, onnx_path, "onnx", "int8") == 0
    outs, labels, largest = run_with_kernel(onnx.load(str(onnx_path)), x.astype(np.int32))
    assert largest <= 127 and (labels == want[:, -1, 0]).all()


def test_onnxruntime_int8_gets_every_label_of_the_dataset(certs: dict[str, Path]) -> None:
    from int_kernels import run_with_kernel

    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )
    from exactmem.exporters.lowp_onnx import build_int8_model
    from exactmem.exporters.onnx_export import dataset_array, run_onnx

    cert: Any = read_certificate(str(certs["int8"]))
    ds = dataset_from_certificate(cert, certs["int8"].parent)
    model = build_int8_model(spec_from_certificate(cert))
    outs, labels = run_onnx(model, dataset_array(ds, "int8"))
    assert outs.dtype == np.int32
    assert (outs[:, -1, 0] == np.array(ds.labels)).all() and (labels == ds.labels).all()
    for kernel in ("pairs", "quads"):  # the kernels of other CPUs, modelled
        outs, labels, _ = run_with_kernel(model, dataset_array(ds, "int8"), kernel)
        assert (labels == ds.labels).all()
