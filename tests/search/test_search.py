"""Search against classical facts: XOR, conflicting labels; the encoding's pieces."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import ScaledMatrix
from exactmem.model.dataset import Dataset, save_dataset
from exactmem.model.evaluate import evaluate
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    Linear,
    NetworkSpec,
)
from exactmem.search.drive.query import run_query
from exactmem.search.drive.sweep import Limits, minimize
from exactmem.search.encode.encoding import EncodeOptions, TieMode, encode
from exactmem.search.encode.formula import Poly
from exactmem.search.encode.witness import pad_witness
from exactmem.search.question.outcome import Assignment, Found, Infeasible
from exactmem.search.question.shape import SearchReadout, Shape, nests_in, spec_of
from exactmem.search.solvers import z3_backend

POINTS = [(0, 0), (1, 0), (0, 1), (1, 1)]


def xor(labels: tuple[int, ...] = (0, 1, 1, 0)) -> Dataset:
    """Four 2-D points as length-1 sequences."""
    seqs = tuple(((Fraction(a), Fraction(b)),) for a, b in POINTS[:len(labels)])
    return Dataset("next-token", "vectors", seqs, labels, dim=2)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("readout", ["scalar", "argmax"])
def test_xor_needs_one_relu_with_residual_two_without(readout: SearchReadout) -> None:
    with_res = minimize(xor(), Shape(readout=readout, residual=True), "ff-width",
                        Limits(max_ff_width=3), timeout_s=60)
    assert with_res["status"] == "found" and with_res["proved_minimal"]
    assert with_res["minimal"]["ff_width"] == 1
    assert [e["status"] for e in with_res["sizes"]] == ["infeasible", "found"]
    without = minimize(xor(), Shape(readout=readout, residual=False), "ff-width",
                       Limits(max_ff_width=3), timeout_s=60)
    assert without["status"] == "found" and without["proved_minimal"]
    assert without["minimal"]["ff_width"] == 2
    one = without["sizes"][1]
    assert one["shape"]["ff_width"] == 1 and one["status"] == "infeasible"
    assert one["proof_kind"].startswith("z3") and "enc2" in one["proof_kind"]
    assert one["crosscheck"]["enc2"] == "unsat"


def test_found_xor_network_is_a_certificate_exactmem_check_verifies(tmp_path: Path) -> None:
    data = tmp_path / "xor.json"
    save_dataset(xor(), data)
    proc = cli("search", str(data), "--readout", "scalar", "--minimize", "ff-width",
               "--residual", "off", "--certificates", str(tmp_path / "certs"), "--json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["status"] == "found" and rep["proved_minimal"] is True
    assert rep["minimal"]["ff_width"] == 2 and rep["minimal"]["params"] > 0
    found = [e for e in rep["sizes"] if e["status"] == "found"]
    assert len(found) == 1
    for e in rep["sizes"]:
        assert {"shape", "status", "seconds", "params"} <= set(e)
    check = cli("check", found[0]["certificate"])
    assert check.returncode == 0 and check.stdout.endswith("\ns VERIFIED\n")


def test_conflicting_labels_are_infeasible_at_every_size() -> None:
    seqs = tuple(((Fraction(a), Fraction(b)),) for a, b in POINTS + [(0, 0)])
    ds = Dataset("next-token", "vectors", seqs, (0, 1, 1, 0, 1), dim=2)
    rep = minimize(ds, Shape(), "params", Limits(1, 1, 2, 2))
    assert rep["status"] == "infeasible" and rep["minimal"] is None
    for shape in (Shape(), Shape(2, 2, 2, 2, 3), Shape(1, 1, 2, 1, 2, False, "scalar")):
        res = run_query(ds, shape)
        assert isinstance(res.outcome, Infeasible)
        assert res.outcome.proof_kind == "label-consistency"
    # the solver reaches the same verdict from the encoding alone
    for shape in (Shape(), Shape(1, 1, 2, 2, 2)):
        assert isinstance(z3_backend.solve(encode(ds, shape), 60), Infeasible)


def test_token_sequences_permutation_conflict_is_infeasible() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 1, 2), (1, 0, 2)), (0, 1), vocab_size=3)
    res = run_query(ds, Shape(2, 2, 2, 2, 2))
    assert isinstance(res.outcome, Infeasible) and res.outcome.proof_kind == "label-consistency"


def test_margin_ties_and_split_ties_both_memorize_a_token_dataset() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 0), (0, 1), (1, 1), (1, 0)), (0, 1, 1, 0),
                 vocab_size=2)
    modes: tuple[TieMode, ...] = ("split", "margin")
    for ties in modes:
        res = run_query(ds, Shape(ff_width=1), EncodeOptions(ties=ties))
        assert isinstance(res.outcome, Found)
        assert evaluate(res.outcome.witness, ds).memorized


def test_head_dim_below_d_model_uses_factor_matrices() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 1), (1, 1), (0, 0)), (1, 0, 0), vocab_size=2)
    shape = Shape(1, 1, 2, 1, 0)
    problem = encode(ds, shape)
    assert "att0.0.Q" in problem.params and "att0.0.A" not in problem.params
    res = run_query(ds, shape)
    assert res.status == "found" and res.certificate is not None


def test_bounded_weights_are_respected() -> None:
    res = run_query(xor(), Shape(ff_width=1, readout="scalar"),
                    EncodeOptions(bound=Fraction(3)))
    assert isinstance(res.outcome, Found)
    from exactmem.model.sizes import matrices

    for m in matrices(res.outcome.witness):
        for row in m.to_fractions():
            assert all(abs(x) <= 3 or x in (0, 1) for x in row)


# pieces --------------------------------------------------------------------------------
fracs = st.fractions(min_value=-5, max_value=5, max_denominator=7)


@settings(max_examples=60, deadline=None)
@given(st.lists(fracs, min_size=3, max_size=3), st.lists(fracs, min_size=4, max_size=4))
def test_poly_arithmetic_is_exact(vals: list[Fraction], cs: list[Fraction]) -> None:
    x, y, z = (Poly.var(i) for i in range(3))
    p = (x * cs[0] + y) * (z - cs[1]) + cs[2] * x * x - cs[3]
    a, b, c = vals
    assert p.evaluate(vals) == (a * cs[0] + b) * (c - cs[1]) + cs[2] * a * a - cs[3]
    assert (p - p).terms == {}


shapes = st.builds(Shape, layers=st.integers(1, 2), heads=st.integers(1, 2),
                   d_model=st.integers(1, 2), head_dim=st.integers(1, 2),
                   ff_width=st.integers(0, 2), residual=st.booleans(),
                   readout=st.just("scalar"))


@settings(max_examples=25, deadline=None)
@given(shapes, shapes, st.integers(0, 10 ** 6))
def test_padding_a_witness_keeps_its_outputs(small: Shape, big: Shape, seed: int) -> None:
    import random

    if not nests_in(small, big):
        return
    rng = random.Random(seed)

    def rand(rows: int, cols: int) -> ScaledMatrix:
        return ScaledMatrix.from_rows([[Fraction(rng.randint(-3, 3), rng.randint(1, 3))
                                        for _ in range(cols)] for _ in range(rows)], cols=cols)

    ds = Dataset("next-token", "token-ids", ((0, 1, 2), (2, 2, 1), (1, 0, 0)), (0, 1, 0),
                 vocab_size=3)
    zero = spec_of(small, "token-ids", 3, 3, 1)
    from exactmem.certificate import spec_from_json, spec_to_json

    net = spec_to_json(zero)
    spec = _randomize(spec_from_json(net), rand)
    padded = pad_witness(spec, small, big)
    assert evaluate(padded, ds).predictions == evaluate(spec, ds).predictions


def _randomize(spec: NetworkSpec, rand: Callable[[int, int], ScaledMatrix]) -> NetworkSpec:
    def r(m: ScaledMatrix) -> ScaledMatrix:
        return rand(*m.shape)

    def aff(a: Affine) -> Affine:
        return Affine(r(a.weight), r(a.bias) if a.bias is not None else None)

    layers: list[Layer] = []
    for x in spec.layers:
        if isinstance(x, Embedding):
            layers.append(Embedding(r(x.table)))
        elif isinstance(x, Linear):
            layers.append(Linear(aff(x.map)))
        elif isinstance(x, FeedForward):
            layers.append(FeedForward(tuple(aff(a) for a in x.layers), x.residual))
        elif isinstance(x, Attention):
            layers.append(Attention(tuple(Head(r(h.query), r(h.key), r(h.value), r(h.output))
                                          for h in x.heads), x.kind, x.residual, x.keys))
    return replace(spec, layers=tuple(layers))


def test_rationalising_an_algebraic_model() -> None:
    """An algebraic model (x = sqrt 2) is replaced by a rational one that still satisfies."""
    import time

    import z3

    from exactmem.search.encode.formula import Problem, eq, ge, le

    p = Problem()
    x, y = p.real("x", param=True), p.real("y", param=True)
    p.add(eq(x * x, y * 2))
    p.add(ge(y, 1))
    p.add(le(y, 2))
    ctx = z3.Context()
    tr = z3_backend._Translator(p, ctx)
    assertions = [tr.formula(f) for f in p.constraints]
    s = z3.Solver(ctx=ctx)
    s.add(*assertions, tr.reals[1] == 1, tr.reals[0] > 0)
    assert s.check() == z3.sat
    model = s.model()
    assert not z3.is_rational_value(model.eval(tr.reals[0]))  # sqrt 2
    out = z3_backend._rationalise(z3, ctx, tr, p, assertions, model, time.monotonic() + 30)
    assert isinstance(out, Assignment) and out.rational_resolve
    xv, yv = out.values
    assert xv * xv == 2 * yv and 1 <= yv <= 2
