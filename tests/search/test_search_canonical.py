"""One grid point per function of a scalar head or hidden unit (``canonical``): the kept
representative computes the same map as every grid point it stands for, and the CNF
excludes exactly the others."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from exactmem.checker.proofs import search_reps as canonical
from exactmem.model.dataset import Dataset
from exactmem.search.encode.sat_encoding import encode_bits
from exactmem.search.question.shape import Shape


def _head_output(head: tuple[int, ...], query: int, keys: list[int]) -> Fraction:
    """Hardmax of the scores ``(q query)(k key)`` (ties averaged), times ``o v``: written
    from Kajitsuka & Sato eq. (1), independently of the key functions."""
    q, k, v, o = head
    scores = [(q * query) * (k * x) for x in keys]
    tied = [x for x, s in zip(keys, scores, strict=True) if s == max(scores)]
    return o * v * Fraction(sum(tied), len(tied))


KEY_SETS = [list(ks) for n in (1, 2, 3) for ks in itertools.product(range(-3, 4), repeat=n)]


@pytest.mark.parametrize("bits", [1, 2])
def test_every_scalar_head_computes_its_representatives_function(bits: int) -> None:
    keep = canonical.representatives(bits, 4, canonical.head_key)
    for head in itertools.product(canonical.grid_values(bits), repeat=4):
        rep = keep[canonical.head_key(*head)]
        for keys in KEY_SETS:
            for query in keys:
                assert _head_output(head, query, keys) == _head_output(rep, query, keys), \
                    (head, rep, query, keys)


@pytest.mark.parametrize("bits", [1, 2, 3])
def test_every_scalar_unit_computes_its_representatives_function(bits: int) -> None:
    keep = canonical.representatives(bits, 3, canonical.unit_key)
    assert keep[canonical.unit_key(0, 0, 0)] == (0, 0, 0)
    for w1, b1, w2 in itertools.product(canonical.grid_values(bits), repeat=3):
        r1, rb, r2 = keep[canonical.unit_key(w1, b1, w2)]
        for x, s in itertools.product(range(-30, 31), (1, 2, 6)):
            assert w2 * max(0, w1 * x + b1 * s) == r2 * max(0, r1 * x + rb * s)


def test_the_grid_is_cut_to_one_point_per_function() -> None:
    # 2-bit: 256 heads in 18 functions (sign(QK) in 3, OV in 6), 64 units in 38
    assert len(canonical.representatives(2, 4, canonical.head_key)) == 18
    assert len(canonical.representatives(2, 3, canonical.unit_key)) == 38
    assert len(canonical.excluded(2, 4, canonical.head_key)) == 256 - 18


def _satisfiable(clauses: list[list[int]], assumptions: list[int]) -> bool:
    from pysat.solvers import Solver

    with Solver(name="cadical153", bootstrap_with=clauses) as s:
        return bool(s.solve(assumptions=assumptions))


def _fix(problem: object, head: tuple[int, ...]) -> list[int]:
    weights = problem.weights  # type: ignore[attr-defined]
    return [b if (v >> i) & 1 else -b
            for x, v in zip((weights[f"att0.0.{n}"][0][0] for n in "QKVO"), head, strict=True)
            for i, b in enumerate(x.bits)]


def test_the_cnf_keeps_only_representative_heads() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 1), (1, 0)), (0, 1), vocab_size=2)
    shape = Shape(ff_width=1)
    keep = canonical.representatives(2, 4, canonical.head_key)
    other = (1, 1, 1, 1)
    rep = keep[canonical.head_key(*other)]
    assert rep != other
    problem = encode_bits(ds, shape, 2)
    plain = encode_bits(ds, shape, 2, symmetry=False)
    # both compute the same head; the CNF keeps the representative only, the plain CNF
    # (no symmetry breaking) both
    assert _satisfiable(problem.clauses, _fix(problem, rep))
    assert not _satisfiable(problem.clauses, _fix(problem, other))
    assert _satisfiable(plain.clauses, _fix(plain, other))
