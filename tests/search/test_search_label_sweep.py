"""Label sweep (exactmem.search.finders.label_sweep): the CNF with open label literals has a model
under a labelling exactly when the per-labelling CNF has one, every network it proposes
passes the checker, and all-labellings runs use it without changing any answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exactmem.errors import SpecError
from exactmem.search.drive.all_labellings import run_shape
from exactmem.search.drive.executors import make_executor
from exactmem.search.drive.query import run_bits_query
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.encode.sat_encoding import encode_labelled
from exactmem.search.finders.label_sweep import LabelSweep, applies
from exactmem.search.question.labellings import generate_inputs, labelling_classes
from exactmem.search.question.outcome import certify_witness
from exactmem.search.question.shape import Shape

SHAPES = [Shape(1, 1, 1, 1, 0, True, "argmax"), Shape(1, 1, 2, 1, 0, True, "argmax"),
          Shape(1, 1, 1, 1, 1, False, "argmax")]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
def test_sweep_finds_a_network_exactly_when_the_labelling_cnf_has_one(shape: Shape) -> None:
    seqs = generate_inputs(5, 2, 3)
    q = ExhaustiveRun(seqs, 3)
    sweep = LabelSweep(q.dataset((0,) * len(seqs)), shape, 2)
    try:
        for cls in labelling_classes(seqs, 2, True):
            ds = q.dataset(cls.labels)
            spec, _ = sweep.network(cls.labels, 200_000)
            alone = run_bits_query(ds, shape, 2, conflicts=200_000)
            assert alone.status in ("found", "infeasible"), cls.labels
            assert (spec is not None) is (alone.status == "found"), cls.labels
            if spec is not None:
                _, failures = certify_witness(ds, shape, spec, EncodeOptions(), 2)
                assert not failures, (cls.labels, failures)
        assert sweep.answered["unknown"] == 0
        assert sweep.answered["sat"] + sweep.answered["unsat"] == \
            len(labelling_classes(seqs, 2, True))
    finally:
        sweep.close()


def test_a_network_proposed_for_one_labelling_fails_its_complement() -> None:
    seqs = generate_inputs(6, 2, 3)
    q = ExhaustiveRun(seqs, 3)
    labels = (0, 1, 1, 0, 0, 1)
    sweep = LabelSweep(q.dataset(labels), SHAPES[1], 2)
    spec, used = sweep.network(labels, 200_000)
    sweep.close()
    assert spec is not None and used >= 0
    assert not certify_witness(q.dataset(labels), SHAPES[1], spec, EncodeOptions(), 2)[1]
    flipped = tuple(1 - y for y in labels)
    assert certify_witness(q.dataset(flipped), SHAPES[1], spec, EncodeOptions(), 2)[1]


def test_two_sequences_of_one_read_position_labelled_apart_get_no_network() -> None:
    seqs = ((0, 1), (1, 0), (1, 1))
    q = ExhaustiveRun(seqs, 2)
    # (0, 1) and (1, 0) differ as read positions (last token); a repeated sequence does not
    twin = ((0, 1), (0, 1), (1, 1))
    sweep = LabelSweep(ExhaustiveRun(twin, 2).dataset((0, 0, 0)), SHAPES[0], 2)
    assert sweep.network((0, 1, 0)) == (None, 0)
    sweep.close()
    assert applies(q.dataset((0, 1, 0)), SHAPES[0], 2)
    assert not applies(q.dataset((0, 1, 0)), SHAPES[0], None)
    assert not applies(q.dataset((0, 1, 0)), Shape(1, 1, 1, 1, 0, True, "scalar"), 2)
    with pytest.raises(SpecError, match="argmax"):
        encode_labelled(q.dataset((0, 1, 0)), Shape(1, 1, 1, 1, 0, True, "scalar"), 2)


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_all_labellings_answer_the_same_with_and_without_the_sweep(executor: str,
                                                                  tmp_path: Path) -> None:
    seqs = generate_inputs(5, 2, 3)
    shape = SHAPES[1]  # d_model 2, no walk (grid 0): every labelling meets the sweep
    summaries, notes = [], []
    for sweep in (0, 20_000):
        q = ExhaustiveRun(seqs, 3, bits=2, conflicts=200_000, sweep=sweep, grid=0)
        path = tmp_path / f"r{sweep}.jsonl"
        store = ResultsFile(path, q.header())
        ex = make_executor(executor, 1 if executor == "serial" else 2, None)
        try:
            summaries.append(run_shape(q, shape, store, ex, show_progress=False))
        finally:
            ex.close()
        recs = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        assert all(r["status"] in ("found", "infeasible") for r in recs)
        assert all(r["verified"] for r in recs if r["status"] == "found")
        notes.append(sum(any("label sweep" in n for n in r.get("notes", [])) for r in recs))
    assert summaries[0]["classes"] == summaries[1]["classes"]
    assert summaries[0]["shatters"] == summaries[1]["shatters"]
    assert notes[0] == 0 and notes[1] == summaries[1]["classes"]["found"] > 0
