"""Rigorous softmax enclosures (exactmem.arith.softmax)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import exp_bounds, softmax_enclosure

scores = st.lists(st.fractions(min_value=-30, max_value=30, max_denominator=50),
                  min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(scores, st.integers(min_value=8, max_value=128))
def test_encloses_and_sums(s: list[Fraction], p: int) -> None:
    enc = softmax_enclosure(s, precision=p)
    assert sum(enc.lower) <= 1 <= sum(enc.upper)
    # cross-check with direct exp bounds at a different precision: p_j in
    # [L_j / sum U, U_j / sum L], which must intersect our enclosure
    b = [exp_bounds(x, p + 7) for x in s]
    tot_lo = sum(x[0] for x in b)
    tot_hi = sum(x[1] for x in b)
    for j, (lo, hi) in enumerate(zip(enc.lower, enc.upper, strict=True)):
        assert max(lo, b[j][0] / tot_hi) <= min(hi, b[j][1] / tot_lo)
    assert enc.width() <= Fraction(len(s) * 16, 2 ** p)


@settings(max_examples=60, deadline=None)
@given(scores, st.integers(min_value=8, max_value=64))
def test_interval_scores_widen_and_shift_invariance(s: list[Fraction], p: int) -> None:
    exact = softmax_enclosure(s, precision=p)
    wide = softmax_enclosure([x - 1 for x in s], [x + 1 for x in s], precision=p)
    for j in range(len(s)):
        assert wide.lower[j] <= exact.upper[j] and exact.lower[j] <= wide.upper[j]
    shifted = softmax_enclosure([x + 7 for x in s], precision=p)
    for j in range(len(s)):
        assert max(exact.lower[j], shifted.lower[j]) <= min(exact.upper[j], shifted.upper[j])


def test_equal_scores_give_uniform_and_order_is_reported() -> None:
    enc = softmax_enclosure([Fraction(2)] * 4, precision=40)
    for lo, hi in zip(enc.lower, enc.upper, strict=True):
        assert lo <= Fraction(1, 4) <= hi
    enc = softmax_enclosure([Fraction(5), Fraction(3), Fraction(0)], precision=64)
    assert enc.order >= 10
    assert enc.lower[0] > Fraction(87, 100) and enc.upper[2] < Fraction(6, 1000)


def test_rejects_bad_rows() -> None:
    with pytest.raises(ValueError):
        softmax_enclosure([])
    with pytest.raises(ValueError):
        softmax_enclosure([Fraction(1)], [Fraction(0)])


# ---- the interval forward pass (exactmem.model.interval) and the checker's twin ----------

def _random_softmax_net(seed: int, hardmax_after: bool) -> tuple[Any, Any]:
    import random

    from exactmem.arith import ScaledMatrix
    from exactmem.model.dataset import Dataset
    from exactmem.model.spec import (
        Affine,
        Attention,
        FeedForward,
        Head,
        Linear,
        NetworkSpec,
        Readout,
    )

    rng = random.Random(seed)

    def mat(r: int, c: int, den: int = 4) -> ScaledMatrix:
        return ScaledMatrix.from_rows([[Fraction(rng.randint(-4, 4), den) for _ in range(c)]
                                       for _ in range(r)])

    d, n, classes = 3, 3, 3
    layers: list[Any] = [
        Attention((Head(mat(2, d), mat(2, d), mat(2, d), mat(d, 2)),
                   Head(mat(2, d), mat(2, d), mat(2, d), mat(d, 2))), kind="softmax",
                  residual=True),
        FeedForward((Affine(mat(4, d), mat(4, 1)), Affine(mat(d, 4))), residual=True),
    ]
    if hardmax_after:
        layers.append(Attention((Head(mat(2, d), mat(2, d), mat(2, d), mat(d, 2)),),
                                kind="hardmax", residual=True))
    layers.append(Linear(Affine(mat(classes, d, 1))))
    spec = NetworkSpec("vectors", d, n, tuple(layers), Readout("argmax", "last"))
    seqs = tuple(tuple(tuple(Fraction(rng.randint(-3, 3), 2) for _ in range(d))
                       for _ in range(n)) for _ in range(12))
    ds = Dataset("next-token", "vectors", seqs, tuple(0 for _ in seqs), dim=d)
    return spec, ds


@settings(max_examples=12, deadline=None)
@given(st.integers(min_value=0, max_value=10 ** 6), st.booleans())
def test_interval_pass_and_checker_agree(seed: int, hardmax_after: bool) -> None:
    """Relabel each sequence with the class its bounds force; then the producer verifies,
    the checker verifies the certificate, and a wrong label is refuted by both."""
    from exactmem.certificate import build_certificate
    from exactmem.checker import check_certificate
    from exactmem.constructions.base import BuildResult
    from exactmem.model.dataset import Dataset
    from exactmem.model.interval import IState, interval_forward
    from exactmem.model.interval_verdict import certify_interval

    spec, ds = _random_softmax_net(seed, hardmax_after)
    try:
        st_, _ = interval_forward(spec, ds, 96)
    except Exception as exc:  # hardmax on intervals may be undecided: a legitimate outcome
        assert "not separated" in str(exc)
        return
    assert isinstance(st_, IState)
    labels = []
    for i in range(ds.N):
        c = st_.index[i, ds.n - 1]
        mid = [int(v) for v in st_.mid[:, c]]
        labels.append(max(range(len(mid)), key=lambda k: mid[k]))
    relabelled = Dataset(ds.task, ds.inputs, ds.sequences, tuple(labels), dim=ds.dim)
    out = certify_interval(spec, relabelled, None, (32, 64, 128))
    if out.status != "verified":  # an exact tie between classes cannot be certified
        assert out.status == "undecided"
        return
    wider = certify_interval(spec, relabelled, None, (256,))
    assert wider.verified
    result = BuildResult(spec=spec, params={}, hints={"softmax": {"precision": out.precision}})
    cert = build_certificate(relabelled, result, "test", out.evaluation)
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    wrong = Dataset(ds.task, ds.inputs, ds.sequences,
                    tuple((y + 1) % 3 for y in labels), dim=ds.dim)
    assert certify_interval(spec, wrong, None, (64,)).status == "refuted"


def test_exact_networks_go_through_the_exact_pass() -> None:
    from exactmem.constructions import get
    from exactmem.datasets.draw import generate
    from exactmem.model.evaluate import evaluate
    from exactmem.model.interval import has_softmax_scores
    from exactmem.model.interval_verdict import certify_interval

    ds = generate("next-token", N=20, n=3, vocab=5, classes=3, seed=1)
    spec = get("lookup").build(ds, {"seed": 0}).spec
    assert not has_softmax_scores(spec)
    out = certify_interval(spec, ds)
    assert out.verified and out.evaluation == evaluate(spec, ds)


def test_undecided_at_the_precision_limit_is_never_verified() -> None:
    """Two classes with identical logits: no precision decides the argmax."""
    import dataclasses

    from exactmem.arith import ScaledMatrix
    from exactmem.model.interval_verdict import certify_interval
    from exactmem.model.spec import Affine, Linear

    spec, ds = _random_softmax_net(5, False)
    row = [Fraction(1), Fraction(-1, 2), Fraction(1, 3)]
    tie = Linear(Affine(ScaledMatrix.from_rows([row, row])))
    spec = dataclasses.replace(spec, layers=(*spec.layers[:-1], tie))
    out = certify_interval(spec, ds, None, (16, 32, 64))
    assert out.status == "undecided" and not out.verified
    assert out.precision == 64 and len(out.undecided) >= 1
