"""Exports: torch state_dict, safetensors bound to the certificate, ONNX run by onnxruntime."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from token_data import token_dataset as shared_token_dataset

from exactmem.arith import ScaledMatrix
from exactmem.certificate import read_certificate, spec_from_certificate, write_certificate
from exactmem.cli import main
from exactmem.constructions.lookup import build
from exactmem.exporters.onnx_export import build_model, dataset_array, run_onnx
from exactmem.exporters.safetensors_io import spec_from_safetensors, verify_binding
from exactmem.exporters.torch import load_network, run_torch, to_torch
from exactmem.model.dataset import Dataset
from exactmem.model.forward import forward, outputs
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
    Readout,
)
from exactmem.pipeline import certify

token_dataset = partial(shared_token_dataset, classes=5)


def vector_dataset(seed: int, N: int, n: int) -> Dataset:
    rng = random.Random(seed)
    vocab = [(Fraction(rng.randint(-9, 9), rng.randint(1, 4)), Fraction(rng.randint(0, 5)))
             for _ in range(4)]
    seqs = sorted({tuple(rng.randrange(4) for _ in range(n)) for _ in range(4 * N)})[:N]
    table: dict[tuple[object, ...], int] = {}
    labels = tuple(table.setdefault((tuple(sorted(s)), s[-1]), rng.randrange(3)) for s in seqs)
    return Dataset("next-token", "vectors", tuple(tuple(vocab[t] for t in s) for s in seqs),
                   labels, dim=2)


def all_labels(ds: Dataset) -> np.ndarray:
    return np.array(ds.labels, dtype=np.int64)


def exact(spec: NetworkSpec, ds: Dataset) -> np.ndarray:
    vals = outputs(spec, forward(spec, ds))
    return np.array([[[float(x) for x in v] for v in row] for row in vals])


def float64_error_bound(spec: NetworkSpec) -> float:
    """A priori bound on |float64 output - exact output|, for any evaluation order.

    Each affine map ``W x + b`` with ``K - 1`` columns evaluated in float64, in any summation
    order, errs by at most ``gamma_K (|W| |x| + |b|)`` (Higham, Accuracy and Stability of
    Numerical Algorithms, Thm. 3.5; ``gamma_K = K u / (1 - K u)``, ``u = 2^-53``); an error
    already in ``x`` grows by at most ``||[W b]||_inf`` through a later map, while ReLU and
    hardmax/uniform attention (convex combinations; the scores of these networks are exact)
    do not increase it.  With ``L`` maps and ``G`` the product of ``max(1, ||[W b]||_inf)``
    over all of them (embedding tables included, so ``G`` also bounds every input), to first
    order ``|error| <= L gamma_K G``.  The precision analysis (:mod:`exactmem.floats.fidelity`)
    decides memorization in float; this bound only says how far apart two correct float64
    evaluations (torch, onnxruntime) may be.
    """
    from exactmem.exporters.skeleton import named_matrices

    norms: dict[str, list[Fraction]] = {}
    cols = 0
    for name, m, _ in named_matrices(spec):
        key = name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name
        rows = [Fraction(sum(abs(x) for x in r), m.den) for r in m.num]
        acc = norms.setdefault(key, [Fraction(0)] * len(rows))
        norms[key] = [a + b for a, b in zip(acc, rows, strict=True)]
        cols = max(cols, m.shape[1])
    k = cols + 1
    u = Fraction(1, 2 ** 53)
    gamma = k * u / (1 - k * u)
    growth = Fraction(1)
    for rows in norms.values():
        growth *= max(Fraction(1), max(rows))
    return float(len(norms) * gamma * growth)


def assert_close(got: np.ndarray, want: np.ndarray, bound: float) -> None:
    assert got.shape == want.shape
    worst = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    assert worst <= bound, f"float outputs differ by {worst:.3g} > bound {bound:.3g}"


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Dataset]:
    ds = token_dataset(7, N=60, n=4, V=6)
    path = tmp_path_factory.mktemp("cert") / "c.json"
    outcome = certify(ds, "lookup", {}, out=path)
    assert outcome.report.verified
    return path, ds


def test_safetensors_export_is_bound_and_reads_back(certified: tuple[Path, Dataset],
                                                    tmp_path: Path) -> None:
    cert, _ = certified
    out = tmp_path / "net.safetensors"
    assert main(["export", str(cert), "--format", "safetensors", "-o", str(out)]) == 0
    side = out.with_name(out.name + ".exact.json")
    assert verify_binding(out, cert, side) == []
    spec = spec_from_certificate(read_certificate(cert))
    assert spec_from_safetensors(out) == spec  # lookup weights are float64 integers
    # a changed sidecar or certificate breaks the binding
    text = side.read_text()
    side.write_text(text.replace('"1"', '"2"', 1))
    assert any("sidecar" in p for p in verify_binding(out, cert, side))
    side.write_text(text)
    obj = read_certificate(cert)
    obj["construction"]["params"]["seed"] = 99
    other = tmp_path / "other.json"
    write_certificate(obj, other)
    assert any("certificate" in p for p in verify_binding(out, other, side))


def test_torch_export_loads_with_weights_only(certified: tuple[Path, Dataset],
                                              tmp_path: Path) -> None:
    cert, ds = certified
    out = tmp_path / "net.pt"
    assert main(["export", str(cert), "--format", "torch", "-o", str(out)]) == 0
    state = torch.load(out, weights_only=True)
    assert isinstance(state["_extra_state"], str)
    net = load_network(str(out))
    spec = spec_from_certificate(read_certificate(cert))
    assert_close(run_torch(net, ds), exact(spec, ds), float64_error_bound(spec))
    x = torch.tensor(ds.sequences, dtype=torch.int64)
    assert torch.equal(net.labels(net(x)), torch.tensor(ds.labels))


def test_rejected_certificate_is_not_exported(certified: tuple[Path, Dataset],
                                              tmp_path: Path) -> None:
    cert, _ = certified
    obj = read_certificate(cert)
    obj["claims"]["outputs"][0][0] = "12345"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(obj))
    out = tmp_path / "x.onnx"
    assert main(["export", str(bad), "--format", "onnx", "-o", str(out)]) == 1
    assert not out.exists()


@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
def test_onnx_float64_reproduces_exact_outputs_and_torch(task: str, tmp_path: Path) -> None:
    ds = token_dataset(11, N=50, n=3, V=5, task=task)
    spec = build(ds, {}).spec
    out = tmp_path / "net.onnx"
    from exactmem.exporters.onnx_export import write_onnx

    write_onnx(spec, out, "float64")
    outs, labels = run_onnx(out, dataset_array(ds))
    pos = spec.read_positions()
    bound = float64_error_bound(spec)
    assert bound < 1 / 4  # well below the label gap of 1
    assert_close(outs[:, list(pos), :], exact(spec, ds), bound)
    assert_close(run_torch(to_torch(spec, "float64"), ds), exact(spec, ds), bound)
    want = np.array(ds.labels, dtype=np.int64)
    assert labels.shape == want.shape and np.array_equal(labels, want)


def test_onnx_vector_inputs_and_hardmax_match_torch() -> None:
    ds = vector_dataset(3, N=12, n=3)
    spec = build(ds, {}).spec
    outs, labels = run_onnx(build_model(spec, "float64"), dataset_array(ds, "float64"))
    th = run_torch(to_torch(spec, "float64"), ds)
    bound = float64_error_bound(spec)
    assert bound < 1 / 4  # labels are integers: a float64 evaluation cannot change them
    assert_close(outs[:, [-1], :], exact(spec, ds), bound)
    assert_close(th, exact(spec, ds), bound)
    assert np.array_equal(labels, all_labels(ds))
    # hardmax with ties, argmax readout at every position
    table = ScaledMatrix.from_rows([[0, 1, 1, 2], [1, 3, 5, 7]])
    head = Head(ScaledMatrix.from_rows([[0, 1]]), ScaledMatrix.from_rows([[1, 0]]),
                ScaledMatrix.from_rows([[0, 1]]), ScaledMatrix.from_rows([[0], [1]]))
    ff = FeedForward((Affine(ScaledMatrix.from_rows([[1, 0], [0, 1], [1, 1]]),
                             ScaledMatrix.column(["-1/2", 0, 0])),
                      Affine(ScaledMatrix.from_rows([[1, 0, 0], [0, 1, 0], [0, 0, 1]]))))
    hspec = NetworkSpec("token-ids", 4, 4, (Embedding(table), Attention((head,)), ff),
                        Readout("argmax", "every"))
    seqs = ((0, 1, 2, 3), (2, 2, 1, 0), (1, 2, 2, 1), (3, 3, 0, 3))
    hds = Dataset("seq2seq", "token-ids", seqs, tuple((0,) * 4 for _ in seqs), vocab_size=4)
    o2, l2 = run_onnx(build_model(hspec, "float64"), dataset_array(hds))
    net = to_torch(hspec, "float64")
    t_out = net(torch.tensor(seqs))
    assert_close(o2, t_out.detach().numpy(), 2 * float64_error_bound(hspec))
    assert np.array_equal(l2, net.labels(t_out).numpy())
    lin = NetworkSpec("token-ids", 4, 4, (Embedding(table), Attention((head,)),
                                          Linear(Affine(ScaledMatrix.from_rows([[0, 1]])))),
                      Readout("scalar", "last"))
    o3, _ = run_onnx(build_model(lin, "float64"), dataset_array(hds))
    assert_close(o3, to_torch(lin, "float64")(torch.tensor(seqs)).detach().numpy(),
                 2 * float64_error_bound(lin))


def test_max_bits_network_runs_exactly_in_float32_torch_and_onnx() -> None:
    ds = token_dataset(5, N=150, n=5, V=8, classes=7)
    spec = build(ds, {"max_bits": 24}).spec
    want = all_labels(ds)
    th = run_torch(to_torch(spec, "float32"), ds)
    # max_bits = 24: every weight, value and partial sum is a float32, so any float32
    # evaluation order gives the exact outputs (the float-exact claim), in every library
    assert np.array_equal(th[:, 0, 0], want.astype(np.float64))
    outs, labels = run_onnx(build_model(spec, "float32"), dataset_array(ds, "float32"))
    assert np.array_equal(labels, want)
    assert np.array_equal(outs[:, -1, 0].astype(np.float64), want.astype(np.float64))


def test_max_bits_zero_is_the_default_network() -> None:
    ds = token_dataset(2, N=30, n=3, V=4)
    assert build(ds, {"max_bits": 0}).spec == build(ds, {}).spec


def test_docs_loading_snippets_run(certified: tuple[Path, Dataset], tmp_path: Path) -> None:
    """The plain-PyTorch, safetensors and onnxruntime snippets of docs/export.md load real
    exports (the safetensors one feeds the rest of the plain-PyTorch snippet)."""
    import re
    import subprocess
    import sys

    cert, ds = certified
    text = (Path(__file__).parents[2] / "docs" / "export.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    plain, st_loader, ort_snippet = blocks
    load_line = next(line for line in plain.splitlines() if line.startswith("state = "))
    st_snippet = plain.replace(load_line, st_loader)
    data = tmp_path / "d.json"
    from exactmem.model.dataset import save_dataset

    save_dataset(ds, data)
    pt, onnx_path = tmp_path / "net.pt", tmp_path / "net.onnx"
    st = tmp_path / "net.safetensors"
    assert main(["export", str(cert), "--format", "torch", "-o", str(pt), "--no-check"]) == 0
    assert main(["export", str(cert), "--format", "safetensors", "-o", str(st),
                 "--no-check"]) == 0
    assert main(["export", str(cert), "--format", "onnx", "--dtype", "float32", "-o",
                 str(onnx_path), "--no-check"]) == 0
    for block, model in ((plain, pt), (st_snippet, st), (ort_snippet, onnx_path)):
        script = tmp_path / "snippet.py"
        script.write_text(block)
        run = subprocess.run([sys.executable, str(script), str(model), str(data)],
                             capture_output=True, text=True, check=True, timeout=120)
        assert "labels correct: 1.0" in run.stdout
