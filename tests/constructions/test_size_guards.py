"""Size claims guarded by measurement: the built networks, not the formulas, are checked.

* the fitted slope of log(nonzero parameters) over log N, N = 64 ... 1024, is at most
  ``SLOPE_MAX`` = 0.65 for both Kajitsuka & Sato tasks (token ids and vectors) and for the
  Vardi memorizer (vectors; on token ids the part after the lookup table);
* width <= 14, and depth, max bits and nonzero parameters at most the Theorem B.1 / E.1 /
  Cor. 4.1 / Lemma C.1 formulas with every hidden constant factor 1
  (:func:`~exactmem.constructions.kajitsuka2025_next_token.theorem_bound`);
* the guards can fail: one block per point (a Theta(N) network) is caught by the slope and
  by the depth formula.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import pytest

from exactmem.constructions import _gadget_c1, get
from exactmem.constructions.bounds import figures, params_split
from exactmem.datasets.draw import generate
from exactmem.model import sizes
from exactmem.model.dataset import Dataset

NS = (64, 128, 256, 512, 1024)
SLOPE_MAX = 0.65
NEXT, S2S, VARDI = "kajitsuka2025-next-token", "kajitsuka2025-seq2seq", "vardi2022-relu"
CASES = [(NEXT, None), (NEXT, 3), (S2S, None), (S2S, 3)]


def dataset(name: str, N: int, dim: int | None) -> Dataset:  # noqa: N803
    if name == NEXT:
        return generate("next-token", N=N, n=16, vocab=64, classes=2, seed=0, dim=dim)
    if name == S2S:
        return generate("seq2seq", N=N, n=4, vocab=64, classes=2, seed=0, dim=dim)
    return generate("next-token", N=N, n=1, vocab=4 * N, classes=4, seed=0, dim=dim)


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(ys) against log(xs)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / \
        sum((a - mx) ** 2 for a in lx)


def measure(name: str, dim: int | None, options: dict[str, Any] | None = None,
            ns: tuple[int, ...] = NS) -> list[dict[str, Any]]:
    """Build (no evaluation) for every N; sizes, the theorem bound and the parameter split."""
    con = get(name)
    rows = []
    for N in ns:  # noqa: N806
        ds = dataset(name, N, dim)
        res = con.build(ds, {**con.defaults(), **(options or {})})
        fig = figures(res.spec, ds, name, dict(res.params))
        rows.append({"N": N, **sizes(res.spec).as_dict(), **params_split(res.spec),
                     "bound": fig["bound"]})
    return rows


@cache
def measured(name: str, dim: int | None) -> tuple[dict[str, Any], ...]:
    return tuple(measure(name, dim))


@pytest.mark.parametrize("name,dim", CASES)
def test_parameters_grow_like_sqrt_n(name: str, dim: int | None) -> None:
    rows = measured(name, dim)
    s = slope([r["N"] for r in rows], [r["params_nonzero"] for r in rows])
    assert s <= SLOPE_MAX, f"{name} dim={dim}: slope {s:.3f} > {SLOPE_MAX}"


@pytest.mark.parametrize("name,dim", CASES)
def test_width_depth_bits_within_the_theorem(name: str, dim: int | None) -> None:
    for r in measured(name, dim):
        b = r["bound"]
        assert r["width"] <= 14 == b["width"]
        assert r["depth"] <= b["depth"], (r["N"], r["depth"], b)
        assert r["max_bits"] <= b["bits"], (r["N"], r["max_bits"], b)
        assert r["params_nonzero"] <= b["params"], (r["N"], r["params_nonzero"], b)


@pytest.mark.parametrize("dim", [None, 3])
def test_vardi_sublinear_and_within_lemma_c1(dim: int | None) -> None:
    rows = measure(VARDI, dim)
    # token ids: the grammar's lookup table has one nonzero per seen token (Theta(N) by
    # necessity); the memorizer after it is guarded
    key = "params_nonzero" if dim else "rest_nonzero"
    s = slope([r["N"] for r in rows], [r[key] for r in rows])
    assert s <= SLOPE_MAX, f"vardi dim={dim}: slope {s:.3f}"
    for r in rows:
        assert r["width"] <= 12 and r["depth"] <= r["bound"]["depth"]
        assert r["max_bits"] <= r["bound"]["bits"]
        if not dim:
            assert r["embedding_nonzero"] == r["N"]


def test_one_block_per_point_fails_the_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Theta(N) mutation: Lemma C.1 with blocks of one point."""
    monkeypatch.setattr(_gadget_c1, "paper_block_size", lambda n_points: 1)
    for name in (NEXT, S2S):
        rows = measure(name, None)
        s = slope([r["N"] for r in rows], [r["params_nonzero"] for r in rows])
        assert s > SLOPE_MAX, f"{name}: the Theta(N) network passed with slope {s:.3f}"
        assert rows[-1]["depth"] > rows[-1]["bound"]["depth"]


def test_one_network_per_point_fails_the_slope() -> None:
    """Theorem F.1 with B = 1 (a Lemma C.1 network per point) is Theta(N) as well."""
    rows = measure(NEXT, None, {"block_points": 1}, ns=NS[:3])
    s = slope([r["N"] for r in rows], [r["params_nonzero"] for r in rows])
    assert s > SLOPE_MAX, f"slope {s:.3f}"
