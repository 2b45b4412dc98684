"""The fidelity report: exact minimal mantissa bits, MPFR forward pass, float runs."""

from __future__ import annotations

from fractions import Fraction
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from token_data import token_dataset as shared_token_dataset

from exactmem.arith import ScaledMatrix
from exactmem.cli import main
from exactmem.constructions.lookup import build
from exactmem.exporters.torch import run_torch, to_torch
from exactmem.floats.fidelity import (
    curves,
    float_rows,
    forward_misses,
    judge,
    memorized_fraction,
    minimal_bits,
    plot,
    precision_report,
    weights_misses,
)
from exactmem.floats.formats import FLOAT64, bits, round_to_format
from exactmem.floats.mpfr_eval import exact_values, forward_float
from exactmem.model.dataset import Dataset
from exactmem.model.forward import forward, outputs
from exactmem.model.spec import Affine, Linear, NetworkSpec, Readout
from exactmem.pipeline import certify

token_dataset = partial(shared_token_dataset, classes=6)


@pytest.fixture(scope="module")
def small() -> tuple[NetworkSpec, Dataset]:
    ds = token_dataset(4, N=40, n=3, V=6)
    return build(ds, {}).spec, ds


def test_minimal_bits_are_exact_witnessed_answers(small: tuple[NetworkSpec, Dataset]) -> None:
    spec, ds = small
    rep = precision_report(spec, ds)
    for mb, misses_at in ((rep.weights, lambda p: weights_misses(spec, ds, p)),
                          (rep.forward, lambda p: forward_misses(spec, ds, bits(p)))):
        assert mb.p is not None and mb.p > 2
        assert misses_at(mb.p) == []  # memorizes at p, on every sequence
        below = misses_at(mb.p - 1)
        assert below and mb.witness == below[0]  # fails at p - 1 on the named sequence
        assert f"sequence {mb.witness.sequence}" in mb.line()
    assert rep.p53_disagreements == () and rep.p53_verdict_disagreements == ()
    # the dtype rows are what a direct float run gives
    for row in rep.rows:
        raw = run_torch(to_torch(spec, row.dtype), ds)
        vals = [[tuple(Fraction(float(v)) for v in vec) for vec in r] for r in raw.tolist()]
        assert row.memorized == memorized_fraction(ds, judge(spec, ds, vals))
    assert "float32" in rep.table() and "(b) forward pass" in rep.table()


def test_scan_holds_on_the_whole_range(small: tuple[NetworkSpec, Dataset]) -> None:
    spec, ds = small
    mb = minimal_bits("a", lambda p: weights_misses(spec, ds, p), ds, 40, scan=True)
    assert mb.p is not None and mb.method == "scan"
    assert all(not weights_misses(spec, ds, p) for p in range(mb.p, mb.upper + 1))
    assert weights_misses(spec, ds, mb.p - 1)


def test_mpfr_at_high_precision_is_the_exact_pass() -> None:
    ds = token_dataset(9, N=30, n=4, V=5)  # n = 4: the uniform 1/n is a float
    spec = build(ds, {}).spec
    got = exact_values(forward_float(spec, ds, bits(120)))
    want = [[tuple(v) for v in row] for row in outputs(spec, forward(spec, ds))]
    assert got == want


def _fl(x: Fraction, p: int) -> Fraction:
    v = round_to_format(x, bits(p))
    assert v is not None
    return v


@settings(max_examples=40, deadline=None)
@given(w=st.lists(st.fractions(min_value=-100, max_value=100, max_denominator=50),
                  min_size=3, max_size=3),
       x=st.lists(st.fractions(min_value=-100, max_value=100, max_denominator=50),
                  min_size=3, max_size=3),
       b=st.fractions(min_value=-100, max_value=100, max_denominator=50),
       p=st.integers(3, 30))
def test_mpfr_affine_is_left_to_right_correct_rounding(w: list[Fraction], x: list[Fraction],
                                                       b: Fraction, p: int) -> None:
    """One affine map, checked against rounding written out by hand on exact rationals."""
    lin = Linear(Affine(ScaledMatrix.row(w), ScaledMatrix.column([b])))
    spec = NetworkSpec("vectors", 3, 1, (lin,), Readout("scalar", "last"))
    ds = Dataset("next-token", "vectors", ((tuple(x),),), (0,), dim=3)
    got = exact_values(forward_float(spec, ds, bits(p)))[0][0][0]
    acc: Fraction | None = None
    for wi, xi in zip(w, x, strict=True):
        if wi == 0:
            continue
        term = _fl(_fl(wi, p) * _fl(xi, p), p)
        acc = term if acc is None else _fl(acc + term, p)
    want = _fl((acc or Fraction(0)) + _fl(b, p), p)
    assert got == want


def test_float64_rows_and_mpfr_agree_on_lookup(small: tuple[NetworkSpec, Dataset]) -> None:
    spec, ds = small
    rows, outs = float_rows(spec, ds, ("float64",))
    mp = exact_values(forward_float(spec, ds, FLOAT64))
    assert [[list(v) for v in r] for r in mp] == [[list(v) for v in r] for r in outs["float64"]]
    assert rows[0].memorized == 1.0


def test_precision_verb_certifies_max_bits_and_rejects_too_few_bits(tmp_path: Path) -> None:
    ds = token_dataset(6, N=80, n=4, V=7)
    ok = tmp_path / "mb.json"
    assert certify(ds, "lookup", {"max_bits": 24}, out=ok).report.verified
    assert main(["precision", str(ok), "--no-search"]) == 0  # --bits 24 from the certificate
    plain = tmp_path / "plain.json"
    assert certify(ds, "lookup", {}, out=plain).report.verified
    assert main(["precision", str(plain), "--no-search", "--bits", "8"]) == 1


def test_plot_is_written(small: tuple[NetworkSpec, Dataset], tmp_path: Path) -> None:
    spec, ds = small
    rep = precision_report(spec, ds, dtypes=("float64",), compare_p53=False)
    curve = curves(spec, ds, rep, window=2)
    a = curve["weights rounded, exact evaluation"]
    assert set(range(2, rep.weights.upper + 1)) <= set(a)
    assert rep.weights.p is not None and a[rep.weights.p] == 1.0
    out = tmp_path / "bits.png"
    plot(curve, str(out), "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@settings(max_examples=60, deadline=None)
@given(x=st.integers(-(1 << 80), 1 << 80), p=st.integers(2, 60))
def test_integer_rounding_matches_mpfr(x: int, p: int) -> None:
    from exactmem.floats.fidelity import round_spec

    spec = NetworkSpec("vectors", 1, 1, (Linear(Affine(ScaledMatrix.row([x]))),),
                       Readout("scalar", "last"))
    got = round_spec(spec, bits(p)).layers[0].map.weight.entry(0, 0)  # type: ignore[union-attr]
    assert got == round_to_format(Fraction(x), bits(p))
