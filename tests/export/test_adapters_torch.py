"""The torch adapter: exact mirror of the spec, exact read-back, training then certifying."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from token_data import token_dataset as shared_token_dataset

from exactmem.arith import ScaledMatrix
from exactmem.certificate import build_certificate
from exactmem.checker import check_certificate
from exactmem.constructions.base import BuildResult
from exactmem.constructions.lookup import build
from exactmem.exporters.torch import from_torch, run_torch, to_torch
from exactmem.floats.formats import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, round_to_format
from exactmem.floats.mpfr_eval import exact_values, forward_float
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import evaluate
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

token_dataset = partial(shared_token_dataset, classes=4)


def exact_outputs(spec: NetworkSpec, ds: Dataset) -> list[list[list[Fraction]]]:
    return [[list(v) for v in row] for row in outputs(spec, forward(spec, ds))]


def torch_outputs(spec: NetworkSpec, ds: Dataset,
                  dtype: str = "float64") -> list[list[list[Fraction]]]:
    raw = run_torch(to_torch(spec, dtype), ds)
    return [[[Fraction(v) for v in vec] for vec in row] for row in raw.tolist()]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 5),
       task=st.sampled_from(["next-token", "seq2seq"]))
def test_lookup_float64_mirror_is_exact_and_round_trips(seed: int, n: int, task: str) -> None:
    ds = token_dataset(seed, N=min(12, 3**n), n=n, V=3, task=task)
    spec = build(ds, {"seed": seed}).spec
    assert torch_outputs(spec, ds) == exact_outputs(spec, ds)
    assert from_torch(to_torch(spec, torch.float64)) == spec
    assert from_torch(to_torch(spec, torch.float64).state_dict()) == spec


def _hardmax_spec(kind: str, readout: str = "scalar") -> NetworkSpec:
    """Tokens embed as (score, value); the query scores every key by its first coordinate,
    so equal scores tie and hardmax must average over all of them."""
    table = ScaledMatrix.from_rows([[0, 1, 1, 2], [1, 3, 5, 7]])
    head = Head(query=ScaledMatrix.from_rows([[0, 0]]) if kind == "uniform" else
                ScaledMatrix.from_rows([[0, 1]]),
                key=ScaledMatrix.from_rows([[1, 0]]),
                value=ScaledMatrix.from_rows([[0, 1]]),
                output=ScaledMatrix.from_rows([[0], [1]]))
    layers: list[object] = [Embedding(table), Attention((head,), kind=kind, residual=True)]  # type: ignore[arg-type]
    if readout == "scalar":
        layers.append(Linear(Affine(ScaledMatrix.from_rows([[0, 1]]))))
    else:
        layers.append(FeedForward((Affine(ScaledMatrix.from_rows([[1, 0], [0, 1], [1, 1]]),
                                          ScaledMatrix.column(["-1/2", 0, 0])),
                                   Affine(ScaledMatrix.from_rows([[1, 0, 0], [0, 1, 0],
                                                                  [0, 0, 1]])))))
    return NetworkSpec("token-ids", 4, 4, tuple(layers),  # type: ignore[arg-type]
                       Readout(readout, "every"))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["hardmax", "uniform"])
@pytest.mark.parametrize("readout", ["scalar", "argmax"])
def test_attention_ties_and_uniform_match_exact_and_mpfr(kind: str, readout: str) -> None:
    spec = _hardmax_spec(kind, readout)
    seqs = [(0, 1, 2, 3), (2, 2, 1, 0), (1, 2, 2, 1), (3, 3, 0, 3), (0, 0, 0, 0), (1, 1, 2, 3)]
    ds = Dataset("seq2seq", "token-ids", tuple(seqs), tuple((0,) * 4 for _ in seqs), vocab_size=4)
    exact = exact_outputs(spec, ds)
    mpfr = [[list(v) for v in row] for row in exact_values(forward_float(spec, ds, FLOAT64))]
    th = torch_outputs(spec, ds)
    assert th == mpfr
    # where the exact value is a float64, the float run reproduces it
    for e_row, t_row in zip(exact, th, strict=True):
        for e_vec, t_vec in zip(e_row, t_row, strict=True):
            for e, t in zip(e_vec, t_vec, strict=True):
                if round_to_format(e, FLOAT64) == e:
                    assert t == e
    # sequence 1 has a three-way tie among scores 1: the mean 11/3 is not a float
    assert any(round_to_format(e, FLOAT64) != e for row in exact for vec in row for e in vec) \
        or kind == "uniform"


@settings(max_examples=60, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_rounding_matches_ieee_casts(x: float) -> None:
    f32 = round_to_format(Fraction(x), FLOAT32)
    want32 = np.float64(np.float32(x)) if abs(x) < 3.4e38 else None
    if want32 is not None and np.isfinite(want32):
        assert f32 is not None and float(f32) == want32
    f16 = round_to_format(Fraction(x), FLOAT16)
    with np.errstate(over="ignore"):  # values that round past 65504 overflow to inf
        want16 = np.float64(np.float16(x)) if abs(x) < 1e6 else np.inf
    assert (f16 is None) == (not np.isfinite(want16))
    if f16 is not None:
        assert float(f16) == want16
    bf = round_to_format(Fraction(x), BFLOAT16)
    got = torch.tensor(x, dtype=torch.float64).to(torch.bfloat16).to(torch.float64).item()
    if np.isfinite(got):
        assert bf is not None and float(bf) == got


def test_non_representable_weights_read_back_as_their_rounding() -> None:
    table = ScaledMatrix.from_rows([["1/3", "2/7"]])
    spec = NetworkSpec("token-ids", 2, 1, (Embedding(table),), Readout("scalar", "last"))
    for dtype, fmt in ((torch.float64, FLOAT64), (torch.float32, FLOAT32),
                       (torch.bfloat16, BFLOAT16), (torch.float16, FLOAT16)):
        back = from_torch(to_torch(spec, dtype))
        got = back.layers[0].table.to_fractions()[0]  # type: ignore[union-attr]
        assert got == [round_to_format(Fraction(1, 3), fmt), round_to_format(Fraction(2, 7), fmt)]
        assert got != [Fraction(1, 3), Fraction(2, 7)]


def test_trained_network_is_read_back_and_certified_or_rejected() -> None:
    ds = token_dataset(3, N=10, n=3, V=3)
    spec = build(ds, {}).spec
    net = to_torch(spec, torch.float32)
    x = torch.tensor(ds.sequences, dtype=torch.int64)
    y = torch.tensor(ds.labels, dtype=torch.float32)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    verdicts = []
    for steps in (0, 3):
        for _ in range(steps):
            opt.zero_grad()
            out = net(x)[:, -1, 0]
            loss = ((out - y) ** 2).mean() + 1e-2 * sum(p.pow(2).sum() for p in net.parameters())
            loss.backward()
            opt.step()
        back = from_torch(net)
        ev = evaluate(back, ds)
        cert = build_certificate(ds, BuildResult(back, {"steps": steps}), "torch-import", ev)
        report = check_certificate(cert)
        assert report.verified == (not ev.failures)
        if not report.verified:
            failing = {f.sequence for f in ev.failures}
            assert failing and all(any(f"sequence {i}" in line for line in report.failures)
                                   for i in failing)
        verdicts.append(report.verified)
    assert verdicts[0] is True  # untouched float32 weights of a small lookup are exact
    assert verdicts[1] is False  # a few steps of weight decay move the weights off the lattice


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_path_matches_cpu() -> None:
    ds = token_dataset(5, N=40, n=4, V=5)
    spec = build(ds, {}).spec
    cpu = run_torch(to_torch(spec, "float32"), ds)
    gpu = run_torch(to_torch(spec, "float32", "cuda"), ds, device="cuda")
    assert np.array_equal(cpu, gpu)
