"""The exact forward pass against the naive reference, and the checker's own pass too."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import run as reference_run

from exactmem.arith import ScaledMatrix
from exactmem.certificate import spec_to_json
from exactmem.checker import verify as checker_verify
from exactmem.checker.parse import network as checker_network
from exactmem.errors import NeedsRigorousSoftmaxError, NotExactError, SpecError
from exactmem.model import (
    Affine,
    Attention,
    Dataset,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
    Readout,
)
from exactmem.model.forward import forward, outputs

small = st.integers(-2, 2)


def mat(draw: st.DrawFn, rows: int, cols: int, den: int = 1) -> ScaledMatrix:
    return ScaledMatrix.from_rows([[Fraction(draw(small), den) for _ in range(cols)]
                                   for _ in range(rows)])


@st.composite
def networks(draw: st.DrawFn) -> tuple[NetworkSpec, Dataset]:
    vocab, m, n = draw(st.integers(2, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    layers: list = [Embedding(mat(draw, m, vocab, draw(st.sampled_from([1, 2, 3]))))]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            s = draw(st.integers(1, 2))
            heads = tuple(Head(mat(draw, s, m), mat(draw, s, m), mat(draw, s, m), mat(draw, m, s))
                          for _ in range(draw(st.integers(1, 2))))
            uniform = draw(st.booleans())
            if uniform:
                heads = tuple(Head(ScaledMatrix.zeros(h.query.shape[0], m), h.key, h.value,
                                   h.output) for h in heads)
            keys = None if draw(st.booleans()) or n == 1 else (0, n - 1)
            layers.append(Attention(heads, "uniform" if uniform else "hardmax",
                                    residual=draw(st.booleans()), keys=keys))
        else:
            q = draw(st.integers(1, 3))
            layers.append(FeedForward((Affine(mat(draw, q, m), mat(draw, q, 1)),
                                       Affine(mat(draw, m, q), mat(draw, m, 1))),
                                      residual=draw(st.booleans())))
    positions = draw(st.sampled_from(["last", "first", "every"]))
    spec = NetworkSpec("token-ids", vocab, n, tuple(layers), Readout("argmax", positions))
    seqs = draw(st.lists(st.tuples(*[st.integers(0, vocab - 1)] * n), min_size=1, max_size=5,
                         unique=True))
    task = "seq2seq" if positions == "every" else "next-token"
    labels = tuple((0,) * n if task == "seq2seq" else 0 for _ in seqs)
    return spec, Dataset(task, "token-ids", tuple(seqs), labels, vocab_size=vocab)


@settings(max_examples=150, deadline=None)
@given(networks())
def test_forward_matches_reference_and_checker(case: tuple[NetworkSpec, Dataset]) -> None:
    spec, ds = case
    fast = outputs(spec, forward(spec, ds))
    net, layers, readout = checker_network(spec_to_json(spec))
    checked = checker_verify.run(net, layers, readout["positions"], list(map(list, ds.sequences)))
    for i in range(ds.N):
        ref = [tuple(v) for v in reference_run(spec, ds, i)]
        assert fast[i] == ref
        assert checked[i] == ref


def one_layer(att: Attention, tokens: list[list[int]]) -> list[tuple[Fraction, ...]]:
    table = ScaledMatrix.from_rows(list(map(list, zip(*tokens, strict=True))))
    spec = NetworkSpec("token-ids", len(tokens), 3, (Embedding(table), att),
                       Readout("argmax", "every"))
    ds = Dataset("seq2seq", "token-ids", ((0, 1, 2),), ((0, 0, 0),), vocab_size=len(tokens))
    return outputs(spec, forward(spec, ds))[0]


def test_hardmax_splits_ties_uniformly() -> None:
    # scores = key . query with key = first coordinate and query = 1: tokens 1 and 2 tie
    one = ScaledMatrix.row([1, 0])
    head = Head(query=ScaledMatrix.row([0, 1]), key=one, value=ScaledMatrix.row([0, 1]),
                output=ScaledMatrix.column([1, 0]))
    out = one_layer(Attention((head,), "hardmax", residual=False),
                    [[0, 1], [5, 3], [5, 7]])
    # every query has q = 1 > 0, so the max key score is shared by tokens 1 and 2: (3 + 7) / 2
    assert all(o == (Fraction(5), Fraction(0)) for o in out)


def test_uniform_attention_equals_zero_scores_and_residual_adds_input() -> None:
    head = Head(query=ScaledMatrix.zeros(1, 2), key=ScaledMatrix.row([1, 0]),
                value=ScaledMatrix.row([1, 0]), output=ScaledMatrix.column([0, 1]))
    toks = [[1, 0], [2, 0], [6, 0]]
    uni = one_layer(Attention((head,), "uniform", residual=True), toks)
    hard = one_layer(Attention((head,), "hardmax", residual=True), toks)
    assert uni == hard == [(Fraction(1), Fraction(3)), (Fraction(2), Fraction(3)),
                           (Fraction(6), Fraction(3))]


def test_softmax_with_scores_needs_rigorous_softmax() -> None:
    one = ScaledMatrix.row([1, 0])
    head = Head(one, one, one, ScaledMatrix.column([1, 0]))
    with pytest.raises(NeedsRigorousSoftmaxError):
        one_layer(Attention((head,), "softmax", residual=False), [[0, 1], [1, 1], [2, 1]])


def test_floats_and_bad_shapes_are_refused() -> None:
    with pytest.raises(NotExactError):
        ScaledMatrix.from_rows([[0.5]])
    with pytest.raises(SpecError):
        FeedForward((Affine(ScaledMatrix.zeros(2, 1)), Affine(ScaledMatrix.zeros(1, 3))))
    with pytest.raises(SpecError):
        NetworkSpec("token-ids", 3, 2, (Linear(Affine(ScaledMatrix.zeros(1, 3))),))
    with pytest.raises(SpecError):
        Attention((Head(*(ScaledMatrix.row([1]),) * 3, ScaledMatrix.row([1])),), "uniform")


def test_big_integers_take_the_exact_object_path() -> None:
    big = 1 << 200
    spec = NetworkSpec("token-ids", 2, 1, (
        Embedding(ScaledMatrix.from_rows([[big, -big]])),
        FeedForward((Affine(ScaledMatrix.from_rows([[big], [1]]), None),
                     Affine(ScaledMatrix.from_rows([[1, Fraction(1, 3)]]), None)))),
        Readout("scalar", "last"))
    ds = Dataset("next-token", "token-ids", ((0,), (1,)), (0, 0), vocab_size=2)
    out = outputs(spec, forward(spec, ds))
    assert out[0][0] == (Fraction(big * big + Fraction(big, 3)),)
    assert out[1][0] == (Fraction(0),)


def test_all_zero_activations_over_a_huge_denominator() -> None:
    import numpy as np

    from exactmem.model.forward import _normalize

    a, den = _normalize(np.zeros((2, 2), dtype=np.int64), 2**70)
    assert den == 1 and not a.any()


def test_matrices_are_written_as_reduced_rationals() -> None:
    """``matrix_to_json`` writes each entry as the reduced ``p/q`` of ``Fraction(x, den)``
    (``"p"`` for integers), for small, huge and negative entries and denominators."""
    import random
    from fractions import Fraction

    from exactmem.arith import ScaledMatrix
    from exactmem.certificate.encode import matrix_to_json

    rng = random.Random(5)
    for _ in range(500):
        den = rng.choice([1, 2, 6, 7, 2**70 + 3, 10**30])
        rows = tuple(tuple(rng.choice([0, 1, -1, den, -den, 3 * den, rng.randrange(-50, 50),
                                       rng.randrange(-10**40, 10**40)]) for _ in range(3))
                     for _ in range(2))
        want = []
        for row in rows:
            texts = []
            for x in row:
                q = Fraction(x, den)
                texts.append(str(q.numerator) if q.denominator == 1
                             else f"{q.numerator}/{q.denominator}")
            want.append(texts)
        assert matrix_to_json(ScaledMatrix(rows, den, 3)) == want
