"""A float-exact claim that verifies holds on this machine: certified
through the CLI, checked, exported to ONNX and torch, run in onnxruntime and torch on CPU
in every claimed format, with subnormals flushed to zero and without.  Compared by labels,
never bit for bit (docs/float-exact.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from exactmem.certificate import dataset_from_certificate, read_certificate
from exactmem.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

# (construction, generate options, --max-bits, formats the certificate must claim)
BUILDS = {
    "lookup24": ("lookup", ["--N", "200", "--n", "8", "--vocab", "16", "--classes", "4",
                            "--seed", "2"], 24, ["float32"]),
    "kajitsuka8": ("kajitsuka2025-next-token", ["--N", "64", "--n", "4", "--vocab", "8",
                                                "--classes", "4", "--seed", "1"], 8,
                   ["bfloat16", "float16", "float32"]),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def certified(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              ) -> tuple[Path, list[str]]:
    con, gen, bits, formats = BUILDS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    data, cert = tmp / "d.json", tmp / "c.json"
    assert main(["generate", "--task", "next-token", *gen, "-o", str(data), "-q"]) == 0
    extra = [a for f in formats for a in ("--float-exact", f)]
    assert main(["certify", str(data), "-c", con, "--max-bits", str(bits), *extra,
                 "-o", str(cert), "-q"]) == 0
    return cert, formats


@pytest.fixture(params=[False, True], ids=["gradual", "flush-to-zero"])
def flush(request: pytest.FixtureRequest) -> Iterator[bool]:
    if request.param and not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals to zero")
    try:
        yield bool(request.param)
    finally:
        torch.set_flush_denormal(False)


def _labels(cert: Path) -> np.ndarray:
    ds = dataset_from_certificate(read_certificate(cert), cert.parent)
    return np.array(ds.labels, dtype=np.float64)


def test_the_claim_verifies_and_is_stated(certified: tuple[Path, list[str]],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cert, formats = certified
    assert json.loads(cert.read_text())["claims"]["float_exact"] == formats
    assert main(["check", str(cert)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "s VERIFIED"
    assert all(f"float-exact in {f} " in out for f in formats), out


def test_onnxruntime_float32_gets_every_label(certified: tuple[Path, list[str]],
                                              flush: bool) -> None:
    from exactmem.exporters.onnx_export import dataset_array, run_onnx

    cert, _ = certified
    model = cert.parent / "c.onnx"
    if not model.exists():
        assert main(["export", str(cert), "--format", "onnx", "--dtype", "float32",
                     "-o", str(model)]) == 0
    ds = dataset_from_certificate(read_certificate(cert), cert.parent)
    _, labels = run_onnx(model, dataset_array(ds, "float32"))
    assert np.array_equal(np.asarray(labels).reshape(-1), _labels(cert))


def test_torch_gets_every_label_in_every_claimed_format(certified: tuple[Path, list[str]],
                                                        flush: bool) -> None:
    from exactmem.exporters.torch import load_network, run_torch

    cert, formats = certified
    ds = dataset_from_certificate(read_certificate(cert), cert.parent)
    for fmt in formats:
        model = cert.parent / f"c.{fmt}.pt"
        if not model.exists():
            assert main(["export", str(cert), "--format", "torch", "--dtype", fmt,
                         "-o", str(model)]) == 0
        net = load_network(str(model))
        assert next(net.parameters()).dtype == getattr(torch, fmt)
        out = run_torch(net, ds)[:, -1, 0]
        assert np.array_equal(np.rint(out), _labels(cert)), (fmt, flush)


def test_the_refused_subnormal_network_does_lose_labels_when_flushed() -> None:
    """The other side: the crafted bfloat16 network the checker now refuses really breaks
    once subnormals are flushed, while its normal-range twin (which verifies) does not."""
    from fractions import Fraction

    from fuzzing_float import tiny_network

    from exactmem.certificate import spec_from_certificate
    from exactmem.exporters.torch import to_torch

    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals to zero")
    try:
        right = {}
        for e in (130, 126):
            c = tiny_network([Fraction(1, 2 ** e)])
            ds = dataset_from_certificate(c)
            net = to_torch(spec_from_certificate(c), torch.bfloat16)
            with torch.no_grad():
                out = net(torch.tensor(ds.sequences, dtype=torch.int64))[:, -1, :]
            right[e] = sum(int(g == y) for g, y in zip(out.argmax(-1).tolist(), ds.labels,
                                                        strict=True))
    finally:
        torch.set_flush_denormal(False)
    assert right[126] == 64 and right[130] < 64, right
