"""The segment clauses of the bit CNF (scalar tails): they hold exactly when the labels
change at most ff_width + 1 times along the sorted streams, every network's own labels
satisfy the CNF with them, and they never change a verdict."""

from __future__ import annotations

import random

from bit_networks import random_network, weight_literals
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker.proofs.search_circuit import Circuit
from exactmem.checker.proofs.search_encode import BitEncoder
from exactmem.model.dataset import Dataset
from exactmem.search.encode.sat_encoding import encode_bits, question, tail_segments
from exactmem.search.question.shape import Shape


def _satisfiable(clauses: list[list[int]], assumptions: list[int] | None = None) -> bool:
    from pysat.solvers import Solver

    with Solver(name="cadical153", bootstrap_with=clauses) as s:
        return bool(s.solve(assumptions=assumptions or []))


def _changes_fit(streams: list[int], labels: list[int], k: int) -> bool:
    """Written directly: equal streams carry equal labels and, along the sorted distinct
    streams, the label changes at most ``k`` times."""
    by_value: dict[int, set[int]] = {}
    for x, y in zip(streams, labels, strict=True):
        by_value.setdefault(x, set()).add(y)
    if any(len(ys) > 1 for ys in by_value.values()):
        return False
    row = [next(iter(by_value[x])) for x in sorted(by_value)]
    return sum(a != b for a, b in zip(row, row[1:], strict=False)) <= k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-6, 6), st.integers(0, 1)), min_size=1, max_size=8),
       st.integers(0, 3))
def test_segment_clauses_hold_exactly_when_the_labels_change_few_times(
        points: list[tuple[int, int]], ff_width: int) -> None:
    ds = Dataset("next-token", "token-ids", ((0,),), (0,), vocab_size=1)
    enc = BitEncoder(question(ds, Shape(ff_width=ff_width), 2))
    enc.c = Circuit()
    keys = [(i, (0,)) for i in range(len(points))]
    enc.segments({key: enc.c.const(x) for key, (x, _) in zip(keys, points, strict=True)},
                 {key: enc.c.true if y else -enc.c.true
                  for key, (_, y) in zip(keys, points, strict=True)})
    assert _satisfiable(enc.c.clauses) == _changes_fit([x for x, _ in points],
                                                       [y for _, y in points], ff_width + 1)


scalar_shapes = st.builds(Shape, layers=st.integers(1, 2), heads=st.integers(1, 2),
                          d_model=st.just(1), head_dim=st.just(1),
                          ff_width=st.integers(0, 3), residual=st.booleans())


@settings(max_examples=25, deadline=None)
@given(scalar_shapes, st.integers(1, 2), st.integers(0, 10 ** 6))
def test_every_scalar_network_satisfies_its_cnf_with_the_segment_clauses(
        shape: Shape, bits: int, seed: int) -> None:
    """Random b-bit networks evaluated exactly: their weights satisfy the CNF of their
    own labels with the segment clauses (and without the symmetry breaking, which the
    random weights need not respect)."""
    probe, values, preds = random_network(shape, bits, random.Random(seed), 3, 3, 6)
    keep = [(s, y) for s, y in zip(probe.sequences, preds, strict=True) if y is not None]
    if not keep:
        return
    ds = Dataset("next-token", "token-ids", tuple(s for s, _ in keep),
                 tuple(int(y) for _, y in keep), vocab_size=3)
    assert tail_segments(ds, shape)
    problem = encode_bits(ds, shape, bits, symmetry=False)
    fix = weight_literals(problem, values)
    assert _satisfiable(problem.clauses, fix)


@settings(max_examples=25, deadline=None)
@given(scalar_shapes, st.integers(0, 10 ** 6))
def test_the_segment_clauses_never_change_a_verdict(shape: Shape, seed: int) -> None:
    rng = random.Random(seed)
    seqs = sorted({tuple(rng.randrange(3) for _ in range(2)) for _ in range(7)})
    # n = 2: distinct sequences are distinct consistency classes, any labels will do
    labels = tuple(rng.randrange(2) for _ in seqs)
    ds = Dataset("next-token", "token-ids", tuple(seqs), labels, vocab_size=3)
    with_them = encode_bits(ds, shape, 1)
    without = encode_bits(ds, shape, 1, segments=False)
    assert len(with_them.clauses) > len(without.clauses)
    assert _satisfiable(with_them.clauses) == _satisfiable(without.clauses)
