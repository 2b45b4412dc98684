"""Witness transfer: a donor's front with a re-fitted tail (exactmem.search.finders.transfer)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from exactmem.arith import ScaledMatrix
from exactmem.certificate import spec_to_json
from exactmem.checker import check_certificate
from exactmem.model.spec import FeedForward
from exactmem.search.drive.all_labellings import run_shape
from exactmem.search.drive.executors import ProcessExecutor, SerialExecutor
from exactmem.search.drive.query import run_query
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.finders.transfer import donor_specs, front_of, transfer
from exactmem.search.question.labellings import generate_inputs, labelling_classes
from exactmem.search.question.outcome import Found
from exactmem.search.question.shape import Shape, spec_of

SHAPE = Shape(1, 1, 1, 1, 1, True, "argmax")
SEQS = generate_inputs(5, 2, 3, seed=1)


def _found(labels: tuple[int, ...], shape: Shape = SHAPE) -> Any:
    res = run_query(ExhaustiveRun(SEQS, 3).dataset(labels), shape, rlimit=20_000_000, timeout_s=120)
    assert isinstance(res.outcome, Found)
    return res.outcome.witness


def test_a_transferred_network_keeps_the_donor_front_and_passes_the_checker() -> None:
    classes = labelling_classes(SEQS, 2, True)
    donor = _found(classes[1].labels)
    moved = 0
    for cls in classes:
        ds = ExhaustiveRun(SEQS, 3).dataset(cls.labels)
        res = transfer(ds, SHAPE, [donor])
        if res is None:
            continue
        moved += 1
        assert res.status == "found"
        assert front_of(res.outcome.witness, SHAPE) == front_of(donor, SHAPE)
        assert check_certificate(res.certificate).verified
    assert moved >= 2  # the donor's own labelling and at least one other


def test_a_front_that_merges_two_sequences_cannot_separate_their_labels() -> None:
    # a zero input map sends every sequence to the same stream: only constant labellings
    zero = spec_of(SHAPE, "token-ids", 3, 2, 2, {"embed": ScaledMatrix.zeros(1, 3)})
    ds = ExhaustiveRun(SEQS, 3).dataset((0, 1, 0, 0, 0))
    assert transfer(ds, SHAPE, [zero]) is None
    const = transfer(ExhaustiveRun(SEQS, 3).dataset((1,) * 5), SHAPE, [zero])
    assert const is not None and check_certificate(const.certificate).verified


def test_full_rank_heads_transfer_through_their_products() -> None:
    shape = Shape(1, 1, 1, 1, 0, True, "argmax")  # head_dim >= d_model: A and B
    assert shape.full_rank_heads
    donor = _found((0, 1, 1, 0, 1), shape)
    names = dict(front_of(donor, shape))
    assert {"embed", "att0.0.A", "att0.0.B"} <= set(names)
    res = transfer(ExhaustiveRun(SEQS, 3).dataset((0, 1, 1, 0, 1)), shape, [donor])
    assert res is not None and check_certificate(res.certificate).verified


def test_smaller_donors_are_padded_and_other_shapes_skipped() -> None:
    small = Shape(1, 1, 1, 1, 0, True, "argmax")
    donor = _found((0, 1, 1, 0, 1), small)
    pairs = [(small.as_dict(), spec_to_json(donor)),
             (Shape(2, 1, 1, 1, 0, False, "argmax").as_dict(), spec_to_json(donor))]
    specs = donor_specs(SHAPE, pairs)
    assert len(specs) == 1
    ff = specs[0].layers[2]
    assert isinstance(ff, FeedForward) and ff.layers[0].weight.shape == (1, 1)


def test_fixed_parameters_are_refused_by_the_multiset_encoding() -> None:
    from exactmem.errors import SpecError

    ds = ExhaustiveRun(SEQS, 3).dataset((0,) * 5)
    with pytest.raises(SpecError, match="positions encoding"):
        encode(ds, SHAPE, EncodeOptions(fixed=(("embed", ((Fraction(1),) * 3,)),)))


def _statuses(store: ResultsFile, shape: Shape) -> dict[str, str]:
    prefix = f"{shape.label()} {shape.readout}|"
    return {k: r["status"] for k, r in store.records.items() if k.startswith(prefix)}


def test_run_shape_transfers_and_answers_like_the_full_queries(tmp_path: Path) -> None:
    q = ExhaustiveRun(SEQS, 3, timeout_s=120, rlimit=20_000_000)
    with_t = ResultsFile(tmp_path / "t.jsonl", q.header())
    run_shape(q, SHAPE, with_t, SerialExecutor(), show_progress=False)
    plain_q = ExhaustiveRun(SEQS, 3, timeout_s=120, rlimit=20_000_000, transfer=False)
    plain = ResultsFile(tmp_path / "p.jsonl", plain_q.header())
    run_shape(plain_q, SHAPE, plain, SerialExecutor(), show_progress=False)
    assert _statuses(with_t, SHAPE) == _statuses(plain, SHAPE)
    moved = [r for r in with_t.records.values()
             if any("re-fitted" in n for n in r.get("notes", []))]
    assert moved, "no labelling was answered by a transfer"
    assert all(r["verified"] and r["status"] == "found" for r in moved)
    assert not any("re-fitted" in n for r in plain.records.values() for n in r.get("notes", []))


def _echo(p: dict[str, Any]) -> dict[str, Any]:
    return {"i": p["i"], "seen": p["seen"]}


def test_process_executor_draws_payloads_as_workers_free() -> None:
    got: list[dict[str, Any]] = []

    def payloads() -> Any:
        for i in range(6):
            yield {"i": i, "seen": len(got)}

    ex = ProcessExecutor(1)
    try:
        for res in ex.run(_echo, payloads()):
            got.append(res)
    finally:
        ex.close()
    # with one worker, payload i is built after the answers to payloads 0 .. i-1
    assert [r["seen"] for r in sorted(got, key=lambda r: r["i"])] == list(range(6))


@pytest.mark.parametrize("ff_width", [0, 1, 2])
def test_the_cheap_tail_test_agrees_with_the_solver(ff_width: int) -> None:
    """``tail_separates`` is exact for one-dimensional streams: on random fronts and
    random labellings it says yes exactly when Z3 re-fits a tail (and the checker agrees)."""
    import random

    from exactmem.search.finders.transfer import random_fronts, streams, tail_separates

    shape = Shape(1, 1, 1, 1, ff_width, True, "argmax")
    rng = random.Random(ff_width)
    seqs = generate_inputs(6, 2, 3, seed=2)
    q = ExhaustiveRun(seqs, 3)
    pool = random_fronts(shape, q.dataset((0,) * 6), 12, seed=ff_width, span=3)
    yes = no = 0
    for spec, ys in pool:
        labels = tuple(rng.randrange(2) for _ in seqs)
        ds = q.dataset(labels)
        assert streams(spec, shape, ds) == ys
        cheap = tail_separates(ys, labels, shape)
        res = transfer(ds, shape, [spec], rlimit=20_000_000, cheap_test=False)
        assert cheap is (res is not None), (labels, ys)
        yes += bool(cheap)
        no += not cheap
    assert yes and (no or ff_width == 2)


def test_random_fronts_answer_labellings_no_donor_could() -> None:
    from exactmem.search.finders.transfer import pool_candidates

    q = ExhaustiveRun(SEQS, 3)
    ds = q.dataset((0, 1, 1, 0, 1))
    cands = pool_candidates(ds, SHAPE, count=200, seed=0, limit=8)
    assert cands
    res = transfer(ds, SHAPE, cands)
    assert res is not None and check_certificate(res.certificate).verified
    # a wider stream has no cheap test: the first fronts are handed over as they are
    wide = Shape(1, 1, 2, 1, 1, True, "argmax")
    assert len(pool_candidates(ds, wide, count=20, seed=0, limit=5)) == 5


@pytest.mark.parametrize("ff_width", [0, 1])
def test_the_threshold_tail_problem_is_satisfied_by_every_network(ff_width: int) -> None:
    """Soundness of a threshold refutation: the labels any network of the shape computes
    (random fronts, random tails) satisfy the threshold-tail problem; and a model's front
    always gets a tail that the checker verifies."""
    import random

    from exactmem.arith import ScaledMatrix
    from exactmem.model.evaluate import evaluate
    from exactmem.search.encode.encoding_positions import encode_thresholds
    from exactmem.search.encode.witness import witness_spec
    from exactmem.search.finders.transfer import random_fronts
    from exactmem.search.question.outcome import Assignment
    from exactmem.search.solvers import z3_backend

    shape = Shape(1, 1, 1, 1, ff_width, True, "argmax")
    rng = random.Random(10 + ff_width)
    seqs = generate_inputs(6, 2, 3, seed=3)
    q = ExhaustiveRun(seqs, 3)
    asked = 0

    def rand(rows: int, cols: int) -> ScaledMatrix:
        return ScaledMatrix.from_rows([[Fraction(rng.randint(-3, 3), rng.choice((1, 2)))
                                        for _ in range(cols)] for _ in range(rows)], cols=cols)

    for spec, _ in random_fronts(shape, q.dataset((0,) * 6), 12, seed=ff_width, span=3):
        mats: dict[str, ScaledMatrix] = {}  # the donor's front, a random tail
        if ff_width:
            mats |= {"ff0.W1": rand(ff_width, 1), "ff0.b1": rand(ff_width, 1),
                     "ff0.W2": rand(1, ff_width), "ff0.b2": rand(1, 1)}
        mats |= {"out.W": rand(2, 1), "out.b": rand(2, 1)}
        head = spec.layers[1].heads[0]  # type: ignore[union-attr]
        mats |= {"embed": spec.layers[0].table,  # type: ignore[union-attr]
                 "att0.0.Q": head.query, "att0.0.K": head.key, "att0.0.V": head.value,
                 "att0.0.O": head.output}
        net = spec_of(shape, "token-ids", 3, 2, 2, mats)
        preds = evaluate(net, q.dataset((0,) * 6)).predictions
        labels = tuple(p[0] for p in preds)
        if None in labels:
            continue  # a tie in the readout: no labelling
        ds = q.dataset(tuple(int(x) for x in labels))  # type: ignore[arg-type]
        thr = encode_thresholds(ds, shape)
        model = z3_backend.solve(thr, 120, rlimit=20_000_000)
        assert isinstance(model, Assignment), (labels, model)
        res = transfer(ds, shape, [witness_spec(ds, shape, thr, model.values)])
        assert res is not None and check_certificate(res.certificate).verified
        asked += 1
    assert asked >= 6


def test_run_query_refutes_through_the_threshold_tail_and_labels_it() -> None:
    seqs = ((0, 0), (0, 2), (0, 3), (1, 1), (1, 3), (2, 0), (2, 1), (2, 2), (3, 2), (3, 3))
    ds = ExhaustiveRun(seqs, 4).dataset((0, 0, 1, 1, 0, 1, 0, 1, 1, 0))
    res = run_query(ds, SHAPE, rlimit=3_000_000, timeout_s=300, cvc5_rlimit=None)
    assert res.status == "infeasible"
    assert res.as_dict()["proof_kind"].startswith("z3-thresholds")
    # a shape the description does not cover is never asked that way
    wide = run_query(ds, Shape(1, 1, 1, 1, 1, False, "argmax"), rlimit=3_000_000,
                     timeout_s=300, cvc5_rlimit=None)
    assert not str(wide.as_dict().get("proof_kind", "")).startswith("z3-thresholds")
