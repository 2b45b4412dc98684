"""Property tests of the float-exact gadgets and the retrieval tables of the float-ready
memorizer: exact values on the stated domain, and every sum of absolute terms within the
stated bound (so a P-bit float evaluation is exact in any order)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.constructions import _float_gadgets as fg
from exactmem.constructions._gadgets import ONE
from exactmem.constructions._retrieval import lookup, peel, solve_tables

SETTINGS = settings(max_examples=40, deadline=None)


def run_steps(steps: fg.Steps, inputs: dict[str, int]) -> tuple[dict[str, int], int]:
    """Evaluate steps over named integer channels (ReLU between steps, none after the last);
    also return the largest ``sum |terms|`` (bias included) of any output."""
    env, worst = dict(inputs), 0
    for i, step in enumerate(steps):
        if i:
            env = {k: max(v, 0) for k, v in env.items()}
        new = {}
        for name, expr in step.items():
            terms = [int(c) * (1 if k == ONE else env[k]) for k, c in expr.items()]
            worst = max(worst, sum(abs(t) for t in terms))
            new[name] = sum(terms)
        env = new
    return env, worst


@SETTINGS
@given(st.integers(1, 500), st.data())
def test_mod_steps(M: int, data: st.DataObject) -> None:  # noqa: N803
    lo = data.draw(st.integers(0, 20 * M))
    hi = data.draw(st.integers(lo, lo + 20 * M))
    c = data.draw(st.integers(lo, hi))
    out, worst = run_steps(fg.mod_steps({"c": 1}, M, lo, hi, "p"), {"c": c})
    assert out["pX"] == 2 * (c % M)
    assert worst <= 4 * hi + 2


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 5), st.data())
def test_bank_steps(Q: int, F: int, m: int, data: st.DataObject) -> None:  # noqa: N803
    words = [[data.draw(st.integers(0, 2 ** 20)) for _ in range(m)] for _ in range(Q)]
    x = data.draw(st.integers(0, Q * F - 1))
    out, worst = run_steps(fg.bank_steps("X", words, F, "p"), {"X": 2 * x})
    assert [out[f"pw{a}"] for a in range(m)] == words[x // F]
    assert out["prr"] == 2 * (x % F)
    assert worst <= max(8 * Q * F + 2, 2 ** 20)


@SETTINGS
@given(st.integers(2, 6), st.integers(1, 8), st.integers(4, 22), st.data())
def test_select_steps(m: int, f: int, wb: int, data: st.DataObject) -> None:
    ws = [data.draw(st.integers(0, 2 ** wb - 1)) for _ in range(m)]
    r = data.draw(st.integers(0, m * f - 1))
    inputs = {f"w{a}": v for a, v in enumerate(ws)} | {"rr": 2 * r}
    out, worst = run_steps(fg.select_steps([f"w{a}" for a in range(m)], "rr", f, wb, "p"), inputs)
    assert out["pw"] == ws[r // f] and out["pt"] == 2 * (r % f)
    assert worst < 3 * 2 ** wb + 4 * m * f


@SETTINGS
@given(st.integers(1, 7), st.integers(1, 4), st.data())
def test_extract_steps(fields: int, bits: int, data: st.DataObject) -> None:
    vals = [data.draw(st.integers(0, 2 ** bits - 1)) for _ in range(fields)]
    s = data.draw(st.integers(0, fields - 1))
    w = sum(v << (bits * (fields - 1 - f)) for f, v in enumerate(vals))
    steps, acc = fg.extract_steps("w", "t", fields, bits, "p")
    out, worst = run_steps([*steps, {"y": acc}], {"w": w, "t": 2 * s})
    assert out["y"] == vals[s]
    assert worst < 2 ** (bits * fields + 1) + 2 * bits * fields + 2


@SETTINGS
@given(st.integers(1, 5), st.data())
def test_mod_sum_steps(b: int, data: st.DataObject) -> None:
    L = 1 << b  # noqa: N806
    a = [data.draw(st.integers(0, L - 1)) for _ in range(3)]
    out, worst = run_steps(fg.mod_sum_steps([{"a0": 1}, {"a1": 1}, {"a2": 1}], L, "y"),
                           {"a0": a[0], "a1": a[1], "a2": a[2]})
    assert out["y"] == sum(a) % L
    assert worst <= 6 * L


def test_merge_refuses_clashes_and_depth_mismatch() -> None:
    with pytest.raises(ValueError, match="clash"):
        fg.merge([{"a": {"x": 1}}], [{"a": {"y": 1}}])
    with pytest.raises(ValueError, match="depths"):
        fg.merge([{"a": {"x": 1}}], [])


@SETTINGS
@given(st.integers(10, 400), st.integers(1, 4), st.integers(0, 10 ** 6))
def test_retrieval_tables_store_every_value(keys: int, b: int, seed: int) -> None:
    rng = random.Random(seed)
    M = int(keys * 1.3 / 3) + 3  # noqa: N806
    edges = list({(rng.randrange(M), rng.randrange(M), rng.randrange(M)) for _ in range(keys)})
    values = [rng.randrange(1 << b) for _ in edges]
    tables = solve_tables(edges, values, (M, M, M), 1 << b)
    if tables is None:  # a 2-core: peeling must have stopped short
        assert peel(edges, (M, M, M)) is None
        return
    for e, y in zip(edges, values, strict=True):
        assert lookup(tables, e, 1 << b) == y
    assert all(0 <= v < 1 << b for t in tables for v in t)


def test_peeling_detects_a_two_core() -> None:
    # every slot of the first two tables has degree two: no slot can be peeled there, and the
    # third table's degree-one slots free nothing
    edges = [(0, 0, 0), (0, 0, 1)]
    assert peel(edges, (1, 1, 2)) is not None  # (0,0,1) peels through slot 1 of table 2
    edges = [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert peel(edges, (2, 2, 1)) is None
