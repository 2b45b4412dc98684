"""vardi2022-relu (Lemma C.1 / Thm F.1): points of length-1 sequences, certified exactly."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.errors import AssumptionError
from exactmem.model import Dataset, sizes
from exactmem.pipeline import certify

NAME = "vardi2022-relu"


def _points(N: int, d: int, seed: int, classes: int) -> Dataset:  # noqa: N803
    rng = random.Random(seed)
    pts: dict[tuple[Fraction, ...], int] = {}
    while len(pts) < N:
        pts[tuple(Fraction(rng.randint(-30, 30), rng.choice((1, 2, 5))) for _ in range(d))] = \
            rng.randrange(classes)
    return Dataset("next-token", "vectors", tuple((p,) for p in pts), tuple(pts.values()), dim=d)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block_size", [0, 1, 7])
def test_vardi_vectors(seed: int, block_size: int) -> None:
    ds = _points(150, 3, seed, 5)
    outcome = certify(ds, NAME, {"seed": seed, "block_size": block_size})
    assert outcome.report.verified, outcome.report.failures[:5]
    assert outcome.certificate["sizes"]["width"] <= 12


def test_vardi_token_ids_and_bounded_bits() -> None:
    ds = generate("next-token", N=60, n=1, vocab=60, classes=4, seed=2)
    plain = certify(ds, NAME)
    bounded = certify(ds, NAME, {"block_points": 3})
    assert plain.report.verified and bounded.report.verified
    assert bounded.certificate["sizes"]["max_bits"] < plain.certificate["sizes"]["max_bits"]
    assert bounded.certificate["sizes"]["depth"] > plain.certificate["sizes"]["depth"]


def test_block_size_trades_depth_for_bits() -> None:
    ds = _points(200, 2, 4, 2)
    build = get(NAME).build
    few = sizes(build(ds, {"block_size": 2}).spec)
    many = sizes(build(ds, {"block_size": 20}).spec)
    assert many.max_bits > few.max_bits


def test_vardi_needs_single_tokens() -> None:
    ds = generate("next-token", N=5, n=2, vocab=4, classes=2, seed=0)
    with pytest.raises(AssumptionError, match="n = 2"):
        get(NAME).build(ds, {})


def test_token_ids_table_holds_one_entry_per_seen_token() -> None:
    """The grammar's lookup table is used as a lookup: the N seen tokens get 2, 4, ..., 2N
    (N nonzero entries, N - 1 being the least any table can have), unused ids 0."""
    ds = generate("next-token", N=50, n=1, vocab=200, classes=3, seed=4)
    outcome = certify(ds, NAME)
    assert outcome.report.verified, outcome.report.failures[:5]
    spec = get(NAME).build(ds, {}).spec
    table = spec.layers[0].table.to_fractions()[0]  # type: ignore[union-attr]
    seen = sorted({seq[0] for seq in ds.sequences})
    assert [table[t] for t in seen] == [2 * (i + 1) for i in range(len(seen))]
    assert sum(1 for x in table if x) == len(seen) == 50
    assert outcome.certificate["construction"]["params"]["projection_top"] == "100"


def test_bound_uses_the_recorded_separation() -> None:
    ds = _points(60, 2, 3, 4)
    res = get(NAME).build(ds, {})
    r2, d2 = Fraction(res.params["r_squared"]), Fraction(res.params["delta_squared"])
    assert r2 >= 1 and 0 < d2 <= 1
    b = get(NAME).bound(N=60, n=1, d=2, C=4, inputs="vectors", **res.params)  # type: ignore[misc]
    assert b["r_over_delta"] == pytest.approx(float((r2 / d2) ** 0.5), rel=1e-6)
    assert b["r_over_delta"] > 1
    ids = get(NAME).bound(N=60, n=1, d=240, C=4, inputs="token-ids")  # type: ignore[misc]
    assert ids["r_over_delta"] == 60 and ids["params"] == 240 + ids["depth"] * 12 * 13
