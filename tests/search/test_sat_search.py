"""Bit-bounded search (SAT): the bit-blaster, the CNF against exact evaluation and against
the real-valued encoding, XOR with checked proofs."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from fractions import Fraction
from itertools import permutations, product
from pathlib import Path

import pytest
from bit_networks import network, random_network, weight_literals
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker.proofs import search_reps as canonical
from exactmem.checker.proofs.lrat import check_lrat_files
from exactmem.checker.proofs.search_circuit import Circuit
from exactmem.model.dataset import Dataset, save_dataset
from exactmem.model.evaluate import evaluate
from exactmem.search.drive.query import run_bits_query, run_query
from exactmem.search.encode.sat_encoding import encode_bits
from exactmem.search.question.shape import Shape
from exactmem.search.solvers.sat_backend import lrat_to_drup as to_drup

POINTS = [(0, 0), (1, 0), (0, 1), (1, 1)]


def xor() -> Dataset:
    seqs = tuple(((Fraction(a), Fraction(b)),) for a, b in POINTS)
    return Dataset("next-token", "vectors", seqs, (0, 1, 1, 0), dim=2)


def _solve(clauses: list[list[int]], assumptions: list[int]) -> set[int] | None:
    from pysat.solvers import Solver

    with Solver(name="cadical153", bootstrap_with=clauses) as s:
        if not s.solve(assumptions=assumptions):
            return None
        return set(s.get_model())


def test_bitblast_arithmetic_is_exact_on_every_input() -> None:
    c = Circuit()
    x, y, z = c.fresh(3), c.fresh(2), c.fresh(4)
    outs = {"add": c.add(x, y), "sub": c.add(x, z, negate_y=True), "mul": c.mul(x, z),
            "mulc": c.mul_const(z, -3), "relu": c.relu(z), "dot": c.dot([x, y], [z, z])}
    lt, zero = c.less(x, y), c.is_zero(c.add(x, y, negate_y=True))
    sel = c.select([(c.less(x, y), x), (-c.less(x, y), z)])
    for xv, yv, zv in product(range(-4, 4), range(-2, 2), range(-8, 8)):
        assum = [b if (v >> i) & 1 else -b for v_int, v in ((x, xv), (y, yv), (z, zv))
                 for i, b in enumerate(v_int.bits)]
        model = _solve(c.clauses, assum)
        assert model is not None
        want = {"add": xv + yv, "sub": xv - zv, "mul": xv * zv, "mulc": -3 * zv,
                "relu": max(0, zv), "dot": (xv + yv) * zv}
        for k, v in want.items():
            assert c.value(outs[k], model) == v, k
        assert (lt in model) == (xv < yv) and (zero in model) == (xv == yv)
        assert c.value(sel, model) == (xv if xv < yv else zv)


shapes = st.builds(Shape, layers=st.integers(1, 2), heads=st.integers(1, 2),
                   d_model=st.integers(1, 2), head_dim=st.integers(1, 2),
                   ff_width=st.integers(0, 2), residual=st.booleans(),
                   readout=st.sampled_from(["argmax", "scalar"]))


@settings(max_examples=10, deadline=None)
@given(shapes, st.integers(1, 3), st.integers(0, 10 ** 6))
def test_every_integer_network_satisfies_its_cnf_and_no_wrong_label_does(
        shape: Shape, bits: int, seed: int) -> None:
    """Random b-bit networks (ties are frequent with small integers) evaluated exactly:
    their weights satisfy the CNF of their own labels, and violate it with a label
    changed -- the CNF states exactly the hardmax semantics of the model."""
    probe, values, preds = random_network(shape, bits, random.Random(seed), 3, 3, 5)
    seqs = probe.sequences
    keep = [(s, int(p)) for s, p in zip(seqs, preds, strict=True)
            if p is not None and Fraction(p).denominator == 1 and p >= 0]  # labels: ints >= 0
    if not keep:
        return
    labels = tuple(p for _, p in keep)
    ds = Dataset("next-token", "token-ids", tuple(s for s, _ in keep), labels, vocab_size=3)
    problem = encode_bits(ds, shape, bits, symmetry=False)
    fix = weight_literals(problem, values)
    assert _solve(problem.clauses, fix) is not None
    wrong = list(labels)
    wrong[0] = (1 - wrong[0]) if shape.readout == "argmax" else wrong[0] + 1
    bad = Dataset("next-token", "token-ids", ds.sequences, tuple(wrong), vocab_size=3)
    problem = encode_bits(bad, shape, bits, symmetry=False)
    assert _solve(problem.clauses, fix) is None
    # symmetry breaking keeps a copy of the network: with scalar heads and units each
    # replaced by its representative (same predictions, evaluated exactly), some
    # reordering of units, head dimensions and heads satisfies the CNF with the
    # exclusion and lex-leader clauses
    values = _representatives(values, shape, bits)
    spec = network(shape, probe, values)
    assert [p[-1] for p in evaluate(spec, ds).predictions] == list(labels)
    sym = encode_bits(ds, shape, bits)
    from pysat.solvers import Solver

    with Solver(name="cadical153", bootstrap_with=sym.clauses) as solver:  # one, incremental
        assert any(solver.solve(assumptions=weight_literals(sym, p))
                   for p in _permuted(values, shape))


def _representatives(values: dict[str, list[list[int]]], shape: Shape, bits: int
                     ) -> dict[str, list[list[int]]]:
    """``d_model = head_dim = 1``: every head and hidden unit replaced by the
    representative of its function (:mod:`exactmem.checker.proofs.search_reps`)."""
    if not canonical.applies(shape.d_model, shape.head_dim, bits):
        return values
    heads = canonical.representatives(bits, 4, canonical.head_key)
    units = canonical.representatives(bits, 3, canonical.unit_key)
    out = {k: [row[:] for row in rows] for k, rows in values.items()}
    for layer in range(shape.layers):
        for h in range(shape.heads):
            names = [f"att{layer}.{h}.{x}" for x in "QKVO"]
            rep = heads[canonical.head_key(*(values[x][0][0] for x in names))]
            for x, v in zip(names, rep, strict=True):
                out[x] = [[v]]
        p = f"ff{layer}."
        for j in range(shape.ff_width):
            w1, b1, w2 = units[canonical.unit_key(values[p + "W1"][j][0],
                                                  values[p + "b1"][j][0],
                                                  values[p + "W2"][0][j])]
            out[p + "W1"][j][0], out[p + "b1"][j][0], out[p + "W2"][0][j] = w1, b1, w2
    return out


def _permuted(values: dict[str, list[list[int]]], shape: Shape
              ) -> list[dict[str, list[list[int]]]]:
    """Every copy of the weights with the units of each feed-forward layer, the dimensions
    of each head and the heads of each layer permuted (the function is unchanged)."""
    out = [values]
    for layer in range(shape.layers):
        nxt = []
        for v in out:
            for units in permutations(range(shape.ff_width)):
                for dims in product(*(list(permutations(range(shape.head_dim)))
                                      for _ in range(shape.heads))):
                    for heads in permutations(range(shape.heads)):
                        w = {k: [row[:] for row in rows] for k, rows in v.items()}
                        if shape.ff_width:
                            p = f"ff{layer}."
                            w[p + "W1"] = [v[p + "W1"][j] for j in units]
                            w[p + "b1"] = [v[p + "b1"][j] for j in units]
                            w[p + "W2"] = [[row[j] for j in units] for row in v[p + "W2"]]
                        for h, src in enumerate(heads):
                            a, b = f"att{layer}.{h}.", f"att{layer}.{src}."
                            perm = dims[src]
                            for x in "QKV":
                                w[a + x] = [v[b + x][r] for r in perm]
                            w[a + "O"] = [[row[r] for r in perm] for row in v[b + "O"]]
                        nxt.append(w)
        out = nxt
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=600)


def test_xor_without_residual_two_bits_needs_two_relus_with_checked_proofs(
        tmp_path: Path) -> None:
    data = tmp_path / "xor.json"
    save_dataset(xor(), data)
    proc = _cli("search", str(data), "--bits", "2", "--residual", "off", "--readout", "scalar",
                "--minimize", "ff-width", "--max-ff-width", "3", "--proofs",
                str(tmp_path / "proofs"), "--certificates", str(tmp_path / "certs"), "--json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["status"] == "found" and rep["proved_minimal"] is True
    assert rep["minimal"]["ff_width"] == 2 and rep["bits"] == 2
    one = rep["sizes"][1]
    assert one["shape"]["ff_width"] == 1 and one["status"] == "infeasible"
    assert one["proof_kind"] == "lrat"
    cnf, proof = one["cnf"], one["proof"]
    assert proof.endswith(".lrat")
    assert check_lrat_files(cnf, proof).verdict == "s VERIFIED"
    verb = _cli("check-proof", cnf, proof)
    assert verb.returncode == 0 and verb.stdout.splitlines()[-1] == "s VERIFIED"
    dratify = pytest.importorskip("dratify")
    cnf_text = Path(cnf).read_text()
    clauses = [[int(x) for x in line.split()[:-1]] for line in cnf_text.splitlines()
               if line[0] not in "cp"]
    drup = to_drup(clauses, Path(proof).read_text())
    assert dratify.check_proof(dratify.parse_dimacs(cnf_text), drup).ok
    found = rep["sizes"][2]
    assert found["status"] == "found"
    check = _cli("check", found["certificate"])
    assert check.returncode == 0 and check.stdout.splitlines()[-1] == "s VERIFIED"
    cert = json.loads(Path(found["certificate"]).read_text())
    assert cert["construction"]["params"]["bits"] == 2
    # the whole answer (vector inputs, certificate files, proved minimal) re-checks
    from exactmem.checker.proofs.search_check import check_search

    assert check_search(rep, tmp_path).verdict == "s VERIFIED"
    del rep["sizes"][0]  # ff-width 0 no longer shown refuted: not proved minimal
    rep["proved_minimal"] = True
    why = check_search(rep, tmp_path).reasons
    assert why and "smaller shape" in why[0]


FIVE = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize("labels", [(0, 1, 1, 0, 0), (0, 1, 1, 0, 1), (1, 0, 0, 0, 1),
                                    (0, 1, 0, 1, 0)])
def test_bit_networks_are_real_networks_and_real_infeasible_is_bit_infeasible(
        labels: tuple[int, ...]) -> None:
    ds = Dataset("next-token", "vectors", tuple(((Fraction(a), Fraction(b)),) for a, b in FIVE),
                 labels, dim=2)
    for shape in (Shape(residual=False, ff_width=0), Shape(residual=False, ff_width=1)):
        bit = run_bits_query(ds, shape, 2)
        real = run_query(ds, shape, timeout_s=30)
        assert bit.status in ("found", "infeasible")
        if bit.status == "found":  # certified and verified: a real network
            assert bit.certificate is not None and real.status != "infeasible"
        if real.status == "infeasible":
            assert bit.status == "infeasible"


def test_all_labellings_with_bits_stores_checkable_proofs(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    proc = _cli("search", "--all-labellings", "--N", "4", "--n", "2", "--vocab", "2", "--bits",
                "1", "--minimize", "ff-width", "--max-ff-width", "1", "--executor", "serial",
                "--results", str(results), "--proofs", str(tmp_path / "p"), "--json")
    rep = json.loads(proc.stdout)
    assert rep["bits"] == 1 and rep["status"] in ("found", "infeasible")
    recs = [json.loads(x) for x in results.read_text().splitlines()[1:]]
    refuted = [r for r in recs if r["status"] == "infeasible"]
    assert refuted and all(r["proof_kind"] == "lrat" for r in refuted)
    for r in refuted:
        assert check_lrat_files(r["cnf"], r["proof"]).verdict == "s VERIFIED"
    assert not [r for r in recs if r["status"] == "unknown"]
