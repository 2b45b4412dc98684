"""The exhaustive plane walk: its "none" agrees with a brute force over every front of the
grid, its networks are certified, and the worker uses it before SAT."""

from __future__ import annotations

import itertools
import random
from functools import cache

import numpy as np
import pytest

from exactmem.checker.proofs.search_reps import grid_values
from exactmem.model.dataset import Dataset
from exactmem.search.drive.worker import query_worker
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.finders import plane_exhaustive
from exactmem.search.finders.plane_exhaustive import PlaneExhaustive
from exactmem.search.finders.plane_net import Front
from exactmem.search.finders.plane_pool import PlanePool
from exactmem.search.question.labellings import generate_inputs
from exactmem.search.question.outcome import certify_witness
from exactmem.search.question.shape import Shape

SEQS3 = tuple(generate_inputs(9, 2, 3))  # every length-2 sequence over 3 tokens


def _shape(ff: int, heads: int = 1, d_model: int = 2) -> Shape:
    return Shape(layers=1, heads=heads, d_model=d_model, head_dim=1, ff_width=ff)


def _ds(labels: tuple[int, ...], seqs: tuple[tuple[int, ...], ...] = SEQS3,
        vocab: int = 3) -> Dataset:
    return Dataset("next-token", "token-ids", seqs, labels, vocab_size=vocab)


@cache
def _brute_force(ff: int, bits: int) -> frozenset[int]:
    """Every labelling (as a word) some b-bit network of the shape memorizes: every
    front of the grid (no symmetry used), every tail (the plane pool's tail table)."""
    ds = _ds((0,) * len(SEQS3))
    pool = PlanePool(ds, _shape(ff), bits)
    g = grid_values(bits)
    words: set[int] = set()
    seen: set[bytes] = set()
    full = (1 << len(SEQS3)) - 1
    for vec in itertools.product(g, repeat=6 + 8):
        arr = np.array(vec, dtype=np.int64)
        front = Front(arr[:6].reshape(2, 3), ((arr[6:8], arr[8:10], arr[10:12], arr[12:14]),))
        xs = pool.streams([front])[0]
        if xs.tobytes() in seen:
            continue
        seen.add(xs.tobytes())
        found, _ = pool._tail_words(xs)
        words.update(int(w) for w in found)
        words.update(int(w) ^ full for w in found)
    return frozenset(words)


def _labels(word: int) -> tuple[int, ...]:
    return tuple((word >> i) & 1 for i in range(len(SEQS3)))


@pytest.mark.parametrize("ff", [0, 1])
def test_found_exactly_when_some_network_of_the_grid_memorizes(ff: int) -> None:
    """1-bit weights, 9 sequences: the walk's verdict equals the brute force's on
    realizable and unrealizable labellings alike, and every network it returns is
    certified by the checker."""
    truth = _brute_force(ff, 1)
    full = (1 << len(SEQS3)) - 1
    words = [w for w in range(1, full)]
    rng = random.Random(ff)
    yes = rng.sample([w for w in words if w in truth], 12)
    no = rng.sample([w for w in words if w not in truth], 12)
    for word in yes + no:
        ds = _ds(_labels(word))
        walk = PlaneExhaustive(ds, _shape(ff), 1)
        out = walk.search()
        assert (out.front is not None) == (word in truth), word
        if out.front is not None:
            cert, failures = certify_witness(ds, _shape(ff), walk.network(out),
                                             EncodeOptions(), 1)
            assert failures == []
        else:
            assert out.embeddings == out.total  # "none" only after the whole walk


def test_two_bit_networks_are_certified_and_a_limit_stops_early() -> None:
    """2-bit weights on 9 sequences: random labellings that the walk serves get
    certified networks; a limit walks only the first embeddings."""
    rng = random.Random(5)
    served = 0
    for _ in range(6):
        labels = tuple(rng.randint(0, 1) for _ in SEQS3)
        if len(set(labels)) < 2:
            continue
        ds = _ds(labels)
        walk = PlaneExhaustive(ds, _shape(1), 2)
        out = walk.search()
        if out.front is not None:
            served += 1
            _, failures = certify_witness(ds, _shape(1), walk.network(out), EncodeOptions(), 2)
            assert failures == []
    assert served
    ds = _ds((0, 1, 1, 0, 1, 0, 0, 1, 1))
    out = PlaneExhaustive(ds, _shape(0), 2).search(limit=3)
    assert out.embeddings <= 3 < out.total


def test_applies_only_to_one_head_of_size_one_in_the_plane() -> None:
    ds = _ds((0, 1) * 4 + (0,))
    assert plane_exhaustive.applies(ds, _shape(1), 2)
    assert not plane_exhaustive.applies(ds, _shape(1, heads=2), 2)
    assert not plane_exhaustive.applies(ds, _shape(1, d_model=1), 2)
    assert not plane_exhaustive.applies(ds, _shape(2), 2)
    assert not plane_exhaustive.applies(ds, _shape(1), None)
    assert not plane_exhaustive.applies(_ds((0,) * 9), _shape(1), 2)  # one label only
    assert not plane_exhaustive.applies(ds, _shape(1), 4)  # too many fronts to walk
    with pytest.raises(ValueError):
        PlaneExhaustive(ds, _shape(1, heads=2), 2)


def test_worker_walks_before_sat_and_says_so() -> None:
    """N = 16 (all length-2 sequences over 4 tokens): a class the sampled walk and SAT
    left open is found by the exhaustive walk and certified; where the walk finds
    nothing, the SAT answer carries that note (and decides on its own)."""
    seqs = tuple(generate_inputs(16, 2, 4))
    labels = tuple(int(c) for c in "0001111100000110")
    payload = {"dataset": _ds(labels, seqs, 4).to_json(), "shape": _shape(1).as_dict(),
               "bits": 2, "conflicts": 1000, "exhaustive": True, "key": "k"}
    res = query_worker(payload)
    assert res["status"] == "found" and res["verified"]
    assert "exhaustive plane walk" in res["notes"][0]
    # 9 sequences, 1 bit, no unit: a labelling no network memorizes (brute force)
    word = min(w for w in range(1, (1 << 9) - 1) if w not in _brute_force(0, 1))
    payload = {"dataset": _ds(_labels(word)).to_json(), "shape": _shape(0).as_dict(),
               "bits": 1, "conflicts": 100000, "exhaustive": True, "key": "k"}
    res = query_worker(payload)
    assert res["status"] == "infeasible" and res["proof_kind"]
    assert any("no network with all" in n and "not a proof" in n for n in res["notes"])


@pytest.mark.parametrize("word", ["0001010101010110", "0001111100010110", "0010110011010010"])
def test_classes_the_sampled_walk_missed_get_certified_networks(word: str) -> None:
    """N = 16, 2 bits, L1 H1 m2 s1 q1: classes that the sampled plane walk of the
    documented run missed.  Few fronts serve them, so a wrong convexity side (the
    unit's sign tried on the wrong facts) loses them: the walk must find each."""
    seqs = tuple(generate_inputs(16, 2, 4))
    ds = _ds(tuple(int(c) for c in word), seqs, 4)
    walk = PlaneExhaustive(ds, _shape(1), 2)
    out = walk.search()
    assert out.front is not None and out.embeddings < out.total
    _, failures = certify_witness(ds, _shape(1), walk.network(out), EncodeOptions(), 2)
    assert failures == []
