"""mahdavi2024-mha: certified on random data at the theorem's count; assumptions refused."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from exactmem.constructions import get
from exactmem.constructions.mahdavi2024_mha import capacity
from exactmem.datasets.draw_attention import generate_for
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.interval_verdict import certify_interval
from exactmem.pipeline import certify

CON = get("mahdavi2024-mha")


def _certify(ds: Dataset, **opts: Any) -> dict[str, Any]:
    outcome = certify(ds, CON.name, opts)
    assert outcome.report.verified, outcome.report.failures[:3]
    return outcome.certificate


@pytest.mark.parametrize(("H", "dh", "n", "d", "shared", "seed"), [
    (1, 3, 3, 4, False, 0), (2, 2, 3, 5, False, 1), (2, 3, 3, 5, True, 2),
    (3, 2, 2, 4, True, 3), (3, 4, 3, 6, False, 4),
])
def test_certified_at_theorem_count(H: int, dh: int, n: int, d: int, shared: bool,
                                    seed: int) -> None:
    ds = generate_for("mahdavi2024-mha", seed=seed, heads=H, head_dim=dh, n=n, dim=d,
                      shared_context=shared)
    assert ds.N == capacity(H, dh, n) and ds.n == n + 1
    cert = _certify(ds, heads=H, head_dim=dh, seed=seed)
    assert cert["claims"]["outputs"] == [[str(y)] for y in ds.labels]
    assert cert["hints"]["softmax"]["epsilon"] == "1/4"


def test_shared_context_capacity_is_tight() -> None:
    """With a shared context the features live in H(n-1)+1 dimensions: one more example
    cannot be certified (the construction says so rather than building a wrong network).
    Labels range over 1000 values, so a lucky fit within 1/4 is very unlikely."""
    H, dh, n, d = 2, 3, 3, 5
    limit = H * (n - 1) + 1
    ds = generate_for("mahdavi2024-mha", seed=5, heads=H, head_dim=dh, n=n, dim=d,
                      shared_context=True, N=limit + 1, classes=1000)
    with pytest.raises(ConstructionError, match="could not certify"):
        CON.build(ds, {**CON.defaults(), "heads": H, "head_dim": dh})


def test_interval_verdicts_are_sound_for_wrong_labels() -> None:
    ds = generate_for("mahdavi2024-mha", seed=6, heads=2, head_dim=2, n=2, dim=4)
    result = CON.build(ds, {**CON.defaults(), "heads": 2, "head_dim": 2})
    wrong = Dataset(ds.task, ds.inputs, ds.sequences, tuple(y + 1 for y in ds.labels), dim=ds.dim)
    out = certify_interval(result.spec, wrong, Fraction(1, 4), (32, 64))
    assert out.status == "refuted" and not out.verified
    tight = certify_interval(result.spec, ds, Fraction(0), (32, 64))
    assert tight.status in ("refuted", "undecided")  # irrational outputs never equal labels


def _base(seed: int = 7) -> Dataset:
    return generate_for("mahdavi2024-mha", seed=seed, heads=2, head_dim=3, n=3, dim=5)


def test_refuses_rank_deficient_context() -> None:
    ds = _base()
    seqs = list(ds.sequences)
    q, x1, x2, _ = seqs[2]
    seqs[2] = (q, x1, x2, tuple(a + b for a, b in zip(x1, x2, strict=True)))
    bad = Dataset(ds.task, ds.inputs, tuple(seqs), ds.labels, dim=ds.dim)
    with pytest.raises(AssumptionError, match=r"Assumption 2.*sequence 2 has rank 2 < n = 3"):
        CON.build(bad, CON.defaults())


def test_refuses_dependent_queries() -> None:
    ds = _base()
    seqs = list(ds.sequences)
    q0, q1 = seqs[0][0], seqs[1][0]
    seqs[4] = (tuple(a - b for a, b in zip(q0, q1, strict=True)), *seqs[4][1:])
    bad = Dataset(ds.task, ds.inputs, tuple(seqs), ds.labels, dim=ds.dim)
    with pytest.raises(AssumptionError, match=r"Assumption 1.*sequences \[0, 1, 4\].*exhaustive"):
        CON.build(bad, CON.defaults())


def test_refuses_context_not_smaller_than_dimension() -> None:
    ds = generate_for("mahdavi2024-mha", seed=8, n=3, dim=4)
    cut = Dataset(ds.task, ds.inputs, tuple(tuple(t[:3] for t in s) for s in ds.sequences),
                  ds.labels, dim=3)
    with pytest.raises(AssumptionError, match="n < d"):
        CON.build(cut, CON.defaults())


def test_sampled_kruskal_check_is_labelled() -> None:
    ds = generate_for("mahdavi2024-mha", seed=9, heads=3, head_dim=3, n=3, dim=5)
    result = CON.build(ds, {**CON.defaults(), "heads": 3, "head_dim": 3, "kruskal_limit": 10,
                            "kruskal_samples": 50})
    assert result.params["kruskal_check"].startswith("sampled (50 random subsets of")
