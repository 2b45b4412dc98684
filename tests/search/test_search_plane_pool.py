"""The sampled walk over wide one-block shapes (exactmem.search.finders.plane_pool): its integer
forward is the exact forward, its orbits are the labelling classes, and every network it
proposes -- token-renamed and label-swapped ones included -- is on the grid and passes the
checker."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from exactmem.certificate import spec_to_json
from exactmem.search.drive.all_labellings import run_shape
from exactmem.search.drive.executors import make_executor
from exactmem.search.drive.query import given_witness
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.finders.grid_pool import word_of
from exactmem.search.finders.plane_pool import PlanePool, applies
from exactmem.search.finders.transfer import streams
from exactmem.search.question.labellings import generate_inputs, labelling_classes
from exactmem.search.question.shape import Shape

SHAPES = [Shape(1, 1, 2, 1, 0), Shape(1, 1, 2, 1, 1), Shape(1, 2, 2, 1, 1)]


def _zeros(seqs: tuple[tuple[int, ...], ...], vocab: int) -> ExhaustiveRun:
    return ExhaustiveRun(seqs, vocab)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
@pytest.mark.parametrize("n", [2, 3])
def test_integer_streams_are_the_exact_streams_times_the_scale(shape: Shape, n: int) -> None:
    seqs = generate_inputs(7, n, 3)
    ds = _zeros(seqs, 3).dataset((0,) * 7)
    pool = PlanePool(ds, shape, 2, seed=n)
    fronts = [pool._draw() for _ in range(30)]
    xs = pool.streams(fronts)
    for i, front in enumerate(fronts):
        exact = streams(pool.network(front, None, ds), shape, ds)
        assert xs[i].tolist() == [[int(v * pool.scale) for v in y] for y in exact], i


@pytest.mark.parametrize("N,vocab", [(7, 3), (9, 4)])
def test_orbits_are_the_labelling_classes(N: int, vocab: int) -> None:  # noqa: N803
    seqs = generate_inputs(N, 2, vocab)
    pool = PlanePool(_zeros(seqs, vocab).dataset((0,) * N), SHAPES[1], 2)
    words = np.arange(1 << N, dtype=np.int64)
    canon = pool.canonical(words)
    classes = labelling_classes(seqs, 2, True)
    assert len(set(canon.tolist())) == len(classes)
    reps = [int(canon[word_of(c.labels)]) for c in classes]
    assert len(set(reps)) == len(classes)  # one orbit per class
    sizes = dict(zip(*np.unique(canon, return_counts=True), strict=True))
    assert sorted(int(sizes[r]) for r in reps) == sorted(c.size for c in classes)
    pool.table = None  # the untabulated path gives the same orbits
    sample = np.random.default_rng(N).integers(0, 1 << N, 200)
    assert pool.canonical(sample).tolist() == canon[sample].tolist()


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: s.label())
def test_every_network_found_is_certified_for_its_labelling(shape: Shape) -> None:
    seqs = generate_inputs(9, 2, 3)  # every sequence: the token permutations are symmetries
    q = ExhaustiveRun(seqs, 3)
    classes = labelling_classes(seqs, 2, True)
    pool = PlanePool(q.dataset((0,) * 9), shape, 2, max_fronts=1500)
    words = {word_of(c.labels): c.labels for c in classes}
    left = pool.cover(words)
    assert len(left) < len(words) // 2  # the walk serves most classes
    renamed = swapped = 0
    for word, labels in words.items():
        if word in left:
            continue
        wit = pool.witness[word]
        renamed += wit.perm != tuple(range(3))
        swapped += wit.flip
        ds = q.dataset(labels)
        net = spec_to_json(pool.spec(word, ds))
        assert given_witness(ds, shape, net, 2, "plane") is not None, labels
    assert renamed and swapped  # the orbit maps are exercised
    # a network is certified for its own labelling only
    word = next(w for w in words if w not in left and 0 < w)
    wrong = tuple(1 - y for y in words[word])
    net = spec_to_json(pool.spec(word, q.dataset(words[word])))
    assert given_witness(q.dataset(wrong), shape, net, 2, "plane") is None


def test_the_walk_goes_on_where_it_stopped_and_is_seeded() -> None:
    seqs = generate_inputs(8, 2, 4)
    q = ExhaustiveRun(seqs, 4)
    words = [word_of(c.labels) for c in labelling_classes(seqs, 2, True)]
    one = PlanePool(q.dataset((0,) * 8), SHAPES[1], 2, seed=3)
    left = one.cover(words, limit=40)
    assert one.walked == 40
    left = one.cover(left, limit=40)
    assert one.walked == 80
    two = PlanePool(q.dataset((0,) * 8), SHAPES[1], 2, seed=3)
    assert two.cover(words, limit=80) == left
    assert {w: one.front_index(w) for w in one.witness} == \
        {w: two.front_index(w) for w in two.witness}


def test_applies_only_to_one_wide_block() -> None:
    ds = _zeros(generate_inputs(6, 2, 3), 3).dataset((0,) * 6)
    assert applies(ds, SHAPES[0], 2) and applies(ds, SHAPES[2], 2)
    assert not applies(ds, SHAPES[0], None)
    assert not applies(ds, Shape(1, 1, 1, 1, 1), 2)  # d_model 1: the grid walk
    assert not applies(ds, Shape(2, 1, 2, 1, 1), 2)
    assert not applies(ds, Shape(1, 1, 2, 1, 2), 2)
    assert not applies(ds, Shape(1, 1, 2, 2, 1), 2)
    assert not applies(ds, Shape(1, 1, 2, 1, 1, False), 2)
    assert not applies(ds, Shape(1, 1, 2, 1, 1, True, "scalar"), 2)
    assert not applies(ds, SHAPES[1], 4)  # too many tails per front


def test_all_labellings_of_a_wide_shape_use_the_walk(tmp_path: Path) -> None:
    seqs = generate_inputs(6, 2, 3)
    q = ExhaustiveRun(seqs, 3, bits=2, conflicts=200_000, proof_dir=str(tmp_path))
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    summary = run_shape(q, SHAPES[1], store, make_executor("serial", 1, None),
                        show_progress=False)
    recs = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()[1:]]
    walked = [r for r in recs if any("grid enumeration" in n for n in r.get("notes", []))]
    assert walked and all(r["status"] == "found" and r["verified"] for r in walked)
    assert summary["classes"]["unknown"] == 0
    assert summary["classes"]["found"] + summary["classes"]["infeasible"] == \
        len(labelling_classes(seqs, 2, True))


def test_seeded_fronts_are_the_networks_fronts() -> None:
    seqs = generate_inputs(9, 2, 3)
    q = ExhaustiveRun(seqs, 3)
    pool = PlanePool(q.dataset((0,) * 9), SHAPES[1], 2, seed=5)
    front = pool._draw()
    net = spec_to_json(pool.network(front, None, q.dataset((0,) * 9)))
    assert pool.seed(net) and len(pool.served) == 1
    assert pool._flat(pool.served[0]).tolist() == pool._flat(front).tolist()
    assert not pool.seed({"layers": []})
    assert not pool.seed({"layers": [{"table": [["1", "0", "0"]]}, {"heads": []}]})


def test_what_sat_leaves_unknown_is_walked_again_near_its_networks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With walks cut after one idle front and SAT under one conflict, the labellings left
    unknown are served by the late walk (certified), none is reported infeasible."""
    from exactmem.search.drive import walks as drive_walks

    real = drive_walks.walk_pool

    def short_walks(q: ExhaustiveRun, shape: Shape, fronts: int | None = None,
                    plane_only: bool = False) -> object:
        pool = real(q, shape, fronts, plane_only)
        if isinstance(pool, PlanePool):
            pool.patience = 1
        return pool

    monkeypatch.setattr(drive_walks, "walk_pool", short_walks)
    seqs = generate_inputs(9, 2, 3)
    q = ExhaustiveRun(seqs, 3, bits=2, conflicts=1, sweep=0)
    store = ResultsFile(tmp_path / "r.jsonl", q.header())
    summary = run_shape(q, SHAPES[1], store, make_executor("serial", 1, None),
                        show_progress=False)
    recs = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()[1:]]
    unknown = {r["key"] for r in recs if r["status"] == "unknown"}
    assert unknown  # SAT could not answer them
    late = [r for r in recs if r["key"] in unknown and r["status"] == "found"]
    assert late and all(r["verified"] and "(sampled)" in r["notes"][0] for r in late)
    assert summary["classes"]["infeasible"] == 0
    assert summary["classes"]["found"] == len(labelling_classes(seqs, 2, True)) - \
        summary["classes"]["unknown"]


@pytest.mark.parametrize("word", ["0001111100000110", "0011010101010110"])
def test_the_documented_n16_networks_are_verified_by_the_checker(word: str) -> None:
    """docs/search.md cites these certificates (29-parameter 2-bit networks for the two
    classes of N = 16 that SAT left open); the stdlib checker must keep verifying them."""
    import subprocess
    import sys

    path = Path(__file__).parents[2] / "docs" / "results" / \
        f"all_labelings_bits2_n16_L1H1m2q1_{word}.cert.json"
    proc = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "s VERIFIED" in proc.stdout, proc.stdout + proc.stderr
    cert = json.loads(path.read_text())
    assert "".join(map(str, cert["dataset"]["data"]["labels"])) == word
    assert cert["dataset"]["data"]["sequences"] == [list(s) for s in generate_inputs(16, 2, 4)]
    assert cert["sizes"]["params_dense"] == 29 and cert["sizes"]["max_bits"] == 2
