"""Grid enumeration (exactmem.search.finders.grid_pool): its integer forward is the exact forward,
every network it proposes is on the grid and passes the checker, and -- where the walk is
exhaustive -- it finds a network exactly for the labellings the SAT encoding finds one for
(so its misses are the SAT refutations)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exactmem.certificate import spec_to_json
from exactmem.model.dataset import Dataset
from exactmem.search.drive.all_labellings import run_shape
from exactmem.search.drive.executors import make_executor
from exactmem.search.drive.query import given_witness, run_bits_query
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.finders.grid_pool import GridPool, applies, grid, word_of
from exactmem.search.finders.transfer import streams
from exactmem.search.question.labellings import generate_inputs, labelling_classes
from exactmem.search.question.outcome import certify_witness
from exactmem.search.question.shape import Shape

SHAPES = [Shape(1, 1, 1, 1, 0, True, "argmax"), Shape(1, 1, 1, 1, 1, True, "argmax"),
          Shape(2, 1, 1, 1, 0, True, "argmax"), Shape(1, 2, 1, 1, 0, True, "argmax")]


def _dataset(seqs: tuple[tuple[int, ...], ...], labels: tuple[int, ...], vocab: int
             ) -> Dataset:
    return ExhaustiveRun(seqs, vocab).dataset(labels)


def test_grid_is_b_bit_twos_complement() -> None:
    assert grid(1) == [-1, 0]
    assert grid(2) == [-2, -1, 0, 1]
    assert grid(3) == list(range(-4, 4))
    assert word_of([1, 0, 1, 1]) == 0b1101


@pytest.mark.parametrize("shape", SHAPES + [Shape(2, 1, 1, 1, 1, True, "argmax")],
                         ids=lambda s: s.label())
@pytest.mark.parametrize("n", [2, 3])
def test_integer_streams_are_the_exact_streams_times_the_scale(shape: Shape, n: int) -> None:
    seqs = generate_inputs(7, n, 3)
    ds = _dataset(seqs, (0,) * 7, 3)
    pool = GridPool(ds, shape, 2, seed=n, max_fronts=300)
    fronts = [int(f) for f in pool.order[:40]]
    xs = pool._streams(fronts)
    for i, front in enumerate(fronts):
        exact = streams(pool.network(front, None, ds), shape, ds)
        assert [int(v) for v in xs[i]] == [y[0] * pool.scale for y in exact], (front, i)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
@pytest.mark.parametrize("bits", [1, 2])
def test_exhaustive_walk_agrees_with_sat_on_every_labelling(shape: Shape, bits: int) -> None:
    """Found by the walk <=> SAT finds a network; every found network verified on the grid."""
    # (five sequences for 2-bit weights, whose refutations are slow; two of them remain)
    seqs = generate_inputs(5 if bits == 2 else 6, 2, 3)
    classes = labelling_classes(seqs, 2, True)
    pool = GridPool(_dataset(seqs, (0,) * len(seqs), 3), shape, bits)
    words = {word_of(c.labels): c.labels for c in classes}
    left = pool.cover(words)
    assert pool.exhaustive or not left
    assert pool.walked == pool.total or not left
    top = 2 ** (bits - 1)
    for word, labels in words.items():
        ds = _dataset(seqs, labels, 3)
        sat = run_bits_query(ds, shape, bits, conflicts=200_000)
        assert sat.status in ("found", "infeasible"), labels
        assert (word not in left) is (sat.status == "found"), (labels, sat.status)
        if word in left:
            continue
        spec = pool.spec(word, ds)
        net = spec_to_json(spec)
        assert given_witness(ds, shape, net, bits, "grid") is not None, labels
        _, failures = certify_witness(ds, shape, spec, EncodeOptions(), bits)
        assert failures == [], labels
        assert all(-top <= int(v) < top for v in _numbers(net)), labels


def _numbers(net: dict) -> list[str]:  # type: ignore[type-arg]
    from exactmem.search.drive.query import _numbers as numbers

    return [str(v) for v in numbers(net["layers"])]


def test_given_witness_rejects_off_grid_and_wrong_networks() -> None:
    seqs = generate_inputs(6, 2, 3)
    shape = SHAPES[1]
    ds = _dataset(seqs, (0, 1, 1, 0, 0, 1), 3)
    pool = GridPool(ds, shape, 2)
    assert not pool.cover([word_of(ds.labels)])
    net = spec_to_json(pool.spec(word_of(ds.labels), ds))
    assert given_witness(ds, shape, net, 2, "grid") is not None
    assert given_witness(ds, shape, net, 1, "grid") is None or \
        all(v in ("0", "-1") for v in _numbers(net))
    big = json.loads(json.dumps(net).replace('"1"', '"2"'))
    if big != net:
        assert given_witness(ds, shape, big, 2, "grid") is None  # 2 is off the 2-bit grid
    flipped = _dataset(seqs, tuple(1 - y for y in ds.labels), 3)
    assert given_witness(flipped, shape, net, 2, "grid") is None  # the checker says no


def test_applies_only_to_one_dimensional_binary_token_shapes() -> None:
    ds = _dataset(generate_inputs(6, 2, 3), (0,) * 6, 3)
    assert applies(ds, SHAPES[0], 2)
    assert not applies(ds, SHAPES[0], None)
    assert not applies(ds, Shape(1, 1, 2, 1, 0, True, "argmax"), 2)
    assert not applies(ds, Shape(1, 1, 1, 1, 0, False, "argmax"), 2)
    assert not applies(ds, Shape(1, 1, 1, 1, 0, True, "scalar"), 2)


def test_all_labellings_with_bits_use_the_walk_and_ask_its_misses_first(tmp_path: Path) -> None:
    seqs = generate_inputs(6, 2, 3)
    q = ExhaustiveRun(seqs, 3, bits=2, conflicts=200_000, proof_dir=str(tmp_path))
    shape = SHAPES[0]
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    summary = run_shape(q, shape, store, make_executor("serial", 1, None),
                        first_failure=True, show_progress=False)
    recs = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()[1:]]
    # the walk misses some labelling of this shape: it is asked first and refuted by LRAT
    assert summary["shatters"] is False and summary["classes"]["infeasible"] == 1
    assert recs[0]["status"] == "infeasible" and recs[0]["proof_kind"] == "lrat"
    assert len(recs) == 1
    q2 = ExhaustiveRun(seqs, 3, bits=2, conflicts=200_000, proof_dir=str(tmp_path))
    store2 = ResultsFile(tmp_path / "r2.jsonl", q2.header())
    run_shape(q2, SHAPES[1], store2, make_executor("serial", 1, None), show_progress=False)
    recs2 = [json.loads(line) for line in (tmp_path / "r2.jsonl").read_text().splitlines()[1:]]
    walked = [r for r in recs2 if any("grid enumeration" in n for n in r.get("notes", []))]
    assert walked and all(r["status"] == "found" and r["verified"] for r in walked)
    sat = [r for r in recs2 if r not in walked]
    assert all(r["status"] == "infeasible" for r in sat)  # exhaustive walk: misses refuted
    assert np.all([r.get("bits") == 2 for r in recs2])


def test_a_budget_cut_after_a_refuted_shape_is_unknown_not_infeasible(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from exactmem.search.drive import all_labellings
    from exactmem.search.drive.all_labellings import shattering_search

    clock = {"now": 0.0}  # the deadline passes exactly when the first shape is done
    real_run_shape: Any = all_labellings.run_shape

    def first_shape_then_late(*args: Any) -> dict[str, Any]:
        summary = real_run_shape(*args[:-1], None)
        clock["now"] = 2.0
        return summary

    monkeypatch.setattr(all_labellings, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    monkeypatch.setattr(all_labellings, "run_shape", first_shape_then_late)
    seqs = generate_inputs(6, 2, 3)
    q = ExhaustiveRun(seqs, 3, bits=2, conflicts=200_000)
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    rep = shattering_search(q, SHAPES[:1] + SHAPES[1:2], store,
                            make_executor("serial", 1, None), first_failure=True,
                            show_progress=False, deadline=1.0)
    assert [s["shatters"] for s in rep["shapes"]] == [False]  # L1 H1 q0 refuted, then cut
    assert rep["status"] == "unknown" and rep["minimal"] is None
    full = shattering_search(q, SHAPES[:1], store, make_executor("serial", 1, None),
                             first_failure=True, show_progress=False)
    assert full["status"] == "infeasible"  # the whole (one-shape) family refuted


@pytest.mark.parametrize("flag", ["--grid-fronts", "--random-fronts", "--sweep-conflicts"])
def test_negative_front_counts_are_refused_with_exit_2(flag: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "exactmem", "search", "--all-labellings",
                           "--N", "4", "--n", "2", "--vocab", "3", "--bits", "2", flag, "-1",
                           "--results", str(tmp_path / "r.jsonl")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_first_failure_asks_what_smaller_shapes_failed_before_the_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from exactmem.search.drive import walks as drive_walks
    from exactmem.search.drive.results import record_key

    seqs = generate_inputs(8, 2, 4)
    q = ExhaustiveRun(seqs, 4, bits=2, conflicts=200_000)
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    # a labelling that no one-head network without hidden units memorizes (LRAT-refuted)
    labels = (0, 0, 1, 0, 0, 1, 1, 0)
    small = Shape(ff_width=0)
    res = run_bits_query(q.dataset(labels), small, 2, conflicts=200_000)
    assert res.status == "infeasible"
    store.add({**res.as_dict(), "key": record_key(small, labels),
               "labels": list(labels)})
    walks: list[int] = []
    monkeypatch.setattr(drive_walks, "grid_witnesses",
                        lambda *args: walks.append(1) or args[2])
    ex = make_executor("serial", 1, None)
    try:
        # the two-head shape is asked that labelling before any walk, and fails on it
        two = run_shape(q, Shape(heads=2), store, ex, first_failure=True,
                        show_progress=False)
    finally:
        ex.close()
    assert two["shatters"] is False and two["classes"]["infeasible"] == 1
    assert walks == []
    assert store.records[record_key(Shape(heads=2), labels)]["status"] == \
        "infeasible"


def test_every_word_the_walk_finds_passes_the_real_tail_test() -> None:
    """``excess`` is 0 for every labelling some walked b-bit network realizes (a b-bit
    tail is a real one), and a labelling far from every front is refuted by SAT."""
    seqs = generate_inputs(8, 2, 4)
    ds = Dataset("next-token", "token-ids", seqs, (0,) * len(seqs), vocab_size=4)
    shape = Shape(ff_width=1)
    pool = GridPool(ds, shape, 2)
    words = range(1 << len(seqs))
    pool.cover(words)
    assert pool.exhaustive
    far = pool.excess(words)
    assert all(far[w] == 0 for w in pool.witness)
    worst = max(words, key=lambda w: far[w])
    assert far[worst] > 0 and worst not in pool.witness
    labels = tuple((worst >> i) & 1 for i in range(len(seqs)))
    res = run_bits_query(Dataset("next-token", "token-ids", seqs, labels, vocab_size=4),
                         shape, 2, conflicts=200_000)
    assert res.status == "infeasible"


def test_a_probe_cut_at_a_quarter_budget_is_asked_again_in_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The labellings smaller shapes failed on are probed under a quarter of the conflict
    budget; one left unknown there is not dropped: it is asked again under the whole
    budget (here it is refuted then, and the shape fails)."""
    from exactmem.search.drive import all_labellings
    from exactmem.search.drive import walks as drive_walks
    from exactmem.search.drive.results import record_key

    seqs = generate_inputs(8, 2, 4)
    q = ExhaustiveRun(seqs, 4, bits=2, conflicts=40_000)
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    labels = (0, 0, 1, 0, 0, 1, 1, 0)
    small = Shape(ff_width=0)
    store.add({"key": record_key(small, labels), "labels": list(labels),
               "shape": small.as_dict(), "status": "unknown", "seconds": 0.0,
               "params": 12})
    shape = Shape(heads=2)
    hard = record_key(shape, labels)
    asked: list[tuple[str, int]] = []

    def worker(p: dict[str, Any]) -> dict[str, Any]:
        asked.append((p["key"], int(p["conflicts"])))
        full = p["key"] == hard and int(p["conflicts"]) == 40_000
        return {"key": p["key"], "shape": p["shape"], "seconds": 0.0, "params": 16,
                "status": "infeasible" if full else "unknown",
                "conflict_budget": int(p["conflicts"])}

    monkeypatch.setattr(all_labellings, "query_worker", worker)
    monkeypatch.setattr(drive_walks, "grid_witnesses", lambda *args: args[2])
    ex = make_executor("serial", 1, None)
    try:
        res = run_shape(q, shape, store, ex, first_failure=True, show_progress=False)
    finally:
        ex.close()
    assert asked[0] == (hard, 10_000)  # first, under a quarter of the budget
    assert (hard, 40_000) in asked  # then again under the whole budget
    assert res["shatters"] is False and store.records[hard]["status"] == "infeasible"
