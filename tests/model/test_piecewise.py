"""The piece-by-piece evaluation of scalar-input ReLU blocks equals the row-major pass:
on random small networks (hypothesis) and on the Kajitsuka & Sato constructions, in the
producer (exactmem.model.piecewise) and in the checker (exactmem.checker.net_piecewise)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import ScaledMatrix
from exactmem.certificate import build_certificate
from exactmem.checker import net_forward as cforward
from exactmem.checker import net_piecewise as cpiece
from exactmem.checker import verify
from exactmem.checker.cert_dataset import dataset as cdataset
from exactmem.checker.parse import network
from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.model import forward as mforward
from exactmem.model import piecewise as mpiece
from exactmem.model.evaluate import Evaluation
from exactmem.model.spec import Affine, FeedForward
from exactmem.pipeline import certify

small = st.fractions(min_value=-4, max_value=4, max_denominator=3)


@st.composite
def scalar_blocks(draw: st.DrawFn) -> tuple[FeedForward, list[tuple[Fraction, ...]]]:
    """A ReLU block reading one scalar (input dim 1, or a first map with one output row),
    and a few input columns (repeats and negatives included)."""
    in_dim = draw(st.sampled_from([1, 1, 2, 3]))
    widths = [in_dim, 1] if in_dim > 1 else [1]
    widths += draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    layers = []
    for a, b in zip(widths, widths[1:], strict=False):
        w = draw(st.lists(st.lists(small, min_size=a, max_size=a), min_size=b, max_size=b))
        bias = draw(st.none() | st.lists(small, min_size=b, max_size=b))
        layers.append(Affine(ScaledMatrix.from_rows(w, cols=a),
                             None if bias is None else ScaledMatrix.column(bias)))
    col = st.tuples(*[st.fractions(min_value=-8, max_value=8, max_denominator=4)] * in_dim)
    cols = draw(st.lists(col, min_size=1, max_size=12))
    return FeedForward(tuple(layers)), cols


def _producer_cols(cols: list[tuple[Fraction, ...]]) -> tuple[np.ndarray, int]:
    m = ScaledMatrix.from_rows(list(zip(*cols, strict=True)), cols=len(cols))
    return np.array(m.num, dtype=object).reshape(m.shape), m.den


def _fractions(out: np.ndarray | list, den: int, by_column: bool) -> list[tuple[Fraction, ...]]:
    if by_column:
        return [tuple(Fraction(int(x), den) for x in c) for c in out]
    return [tuple(Fraction(int(x), den) for x in c) for c in np.asarray(out).T]


def _checker_maps(ff: FeedForward) -> list:
    maps = []
    for aff in ff.layers:
        w = ([list(r) for r in aff.weight.num], aff.weight.den)
        b = (([[r[0]] for r in aff.bias.num], aff.bias.den) if aff.bias is not None
             else ([[0] for _ in aff.weight.num], 1))
        maps.append((w, b))
    return maps


@settings(max_examples=150, deadline=None)
@given(scalar_blocks())
def test_producer_piecewise_equals_dense(block: tuple[FeedForward, list]) -> None:
    ff, cols = block
    arr, den = _producer_cols(cols)
    fast = mforward.apply_feedforward(ff, arr, den)
    slow = mforward.dense_feedforward(ff, arr, den)
    assert _fractions(fast[0], fast[1], False) == _fractions(slow[0], slow[1], False)


@settings(max_examples=150, deadline=None)
@given(scalar_blocks())
def test_checker_piecewise_equals_dense(block: tuple[FeedForward, list]) -> None:
    ff, cols = block
    arr, den = _producer_cols(cols)
    ccols = [tuple(int(x) for x in c) for c in arr.T]
    layer = {"maps": _checker_maps(ff), "residual": False}
    fast, fden = cforward.feedforward(layer, ccols, den)
    slow, sden = cforward._dense(layer["maps"], ccols, den)
    assert _fractions(fast, fden, True) == _fractions(slow, sden, True)


def test_relu_splits_at_the_exact_sign_change() -> None:
    xs = [-3, -1, 0, 2, 2, 5]
    up = cpiece.relu(([0], [2], [-4]), xs)  # 2x - 4: zero at x = 2, positive after
    assert up == ([0, 5], [0, 2], [0, -4])
    down = cpiece.relu(([0], [-1], [0]), xs)  # -x: positive for x < 0 only
    assert down == ([0, 2], [-1, 0], [0, 0])
    assert cpiece.relu(([0, 3], None, [-5, 7]), xs) == ([0, 3], None, [0, 7])
    row = mpiece.relu(mpiece.Rows(np.array([0]), np.array([3], dtype=object),
                                  np.array([-6], dtype=object)), np.array(xs))
    assert row.starts.tolist() == [0, 5] and row.a.tolist() == [0, 3]


@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
def test_constructions_equal_the_row_major_pass(task: str, monkeypatch: pytest.MonkeyPatch,
                                               ) -> None:
    n = 8 if task == "next-token" else 4
    ds = generate(task, N=300, n=n, vocab=12, classes=3, seed=5)  # type: ignore[arg-type]
    name = f"kajitsuka2025-{'next-token' if task == 'next-token' else 'seq2seq'}"
    spec = get(name).build(ds, {"seed": 5}).spec
    assert any(isinstance(la, FeedForward) and len(la.layers) > 20 for la in spec.layers)
    fast = mforward.outputs(spec, mforward.forward(spec, ds))
    res = get(name).build(ds, {"seed": 5})
    ev = Evaluation(tuple(tuple(0 for _ in ds.position_labels(i)) for i in range(ds.N)), ())
    cert = build_certificate(ds, res, name, ev)
    net, layers, readout = network(cert["network"])
    toks = cdataset(cert["dataset"], Path("."))[2]
    cfast = verify.run(net, layers, readout["positions"], toks)

    def dense_only(ff, cols, den, tick=mforward._no_tick):  # type: ignore[no-untyped-def]
        return mforward.dense_feedforward(ff, cols, den, tick)

    def cdense_only(layer, cols, den, tick=cforward.no_tick):  # type: ignore[no-untyped-def]
        assert not layer["residual"]
        return cforward._dense(layer["maps"], cols, den, tick)

    monkeypatch.setattr(mforward, "apply_feedforward", dense_only)
    monkeypatch.setattr(cforward, "feedforward", cdense_only)
    assert mforward.outputs(spec, mforward.forward(spec, ds)) == fast
    assert verify.run(net, layers, readout["positions"], toks) == cfast
    assert [[v[0] for v in row] for row in cfast] == [
        [Fraction(y) for y in ds.position_labels(i)] for i in range(ds.N)]


def test_parallel_pass_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sorted points split into ranges, the ranges evaluated in separate processes and
    joined: the same certificate as one pass (producer and checker), and the same values of
    the deep block in both."""
    ds = generate("next-token", N=200, n=8, vocab=12, classes=3, seed=7)  # type: ignore[arg-type]
    one = certify(ds, "kajitsuka2025-next-token", {"seed": 7})
    calls = {"model": 0, "checker": 0}
    for name, mod in (("model", mpiece), ("checker", cpiece)):
        real = mod._parallel_pass

        def counted(*a: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*a)

        monkeypatch.setattr(mod, "_parallel_pass", counted)
        monkeypatch.setattr(mod, "MIN_POINTS_PER_JOB", 1)
    monkeypatch.setenv("EXACTMEM_JOBS", "2")
    par = certify(ds, "kajitsuka2025-next-token", {"seed": 7})
    assert calls == {"model": 1, "checker": 1}
    assert par.report.verified and par.certificate == one.certificate

    spec = get("kajitsuka2025-next-token").build(ds, {"seed": 7}).spec
    deep = next(la for la in spec.layers if isinstance(la, FeedForward) and len(la.layers) > 20)
    maps = deep.layers[1:]
    x = np.random.default_rng(3).integers(-50, 5000, size=40)
    seq, sden = mpiece.evaluate(maps, x, 3, relu_first=True, jobs=1)
    for fork in (True, False):  # ranges in forked children, or in spawned processes
        monkeypatch.setattr(mpiece.forked, "usable", lambda *, alone=False, _f=fork: _f)
        par3, pden = mpiece.evaluate(maps, x, 3, relu_first=True, jobs=3)
        assert _fractions(par3, pden, False) == _fractions(seq, sden, False)
    cols = [(int(v),) for v in x]
    cseq, csden = cpiece.evaluate(_checker_maps(FeedForward(maps)), cols, 3, True, jobs=1)
    cpar, cpden = cpiece.evaluate(_checker_maps(FeedForward(maps)), cols, 3, True, jobs=3)
    assert _fractions(cpar, cpden, True) == _fractions(cseq, csden, True) == _fractions(
        seq, sden, False)
