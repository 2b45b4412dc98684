"""Kajitsuka & Sato (2025) next-token and seq2seq constructions: certified on random data,
tampering rejected, inconsistent data refused, sizes as the layout predicts."""

from __future__ import annotations

import copy
import random
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest

from exactmem.certificate import digest_of
from exactmem.checker import check_certificate
from exactmem.constructions import get
from exactmem.constructions.kajitsuka2025_next_token import (
    distinguishing_vocabulary,
    token_weights,
)
from exactmem.datasets.draw import generate
from exactmem.errors import ConstructionError, InconsistentLabelsError
from exactmem.model import Dataset, sizes
from exactmem.pipeline import certify

NEXT, S2S = "kajitsuka2025-next-token", "kajitsuka2025-seq2seq"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dim", [None, 3])
def test_next_token_certified(seed: int, dim: int | None) -> None:
    ds = generate("next-token", N=90, n=5, vocab=7, classes=3, seed=seed, dim=dim)
    outcome = certify(ds, NEXT, {"seed": seed})
    assert outcome.report.verified, outcome.report.failures[:5]
    assert outcome.certificate["claims"]["outputs"] == [[str(y)] for y in ds.labels]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dim", [None, 2])
def test_seq2seq_certified(seed: int, dim: int | None) -> None:
    ds = generate("seq2seq", N=40, n=4, vocab=6, classes=4, seed=seed, dim=dim)
    outcome = certify(ds, S2S, {"seed": seed})
    assert outcome.report.verified, outcome.report.failures[:5]


def _permuted_dataset(task: str, inputs: str) -> Dataset:
    """Repeated tokens and consistent permutations (same multiset and last token)."""
    rng = random.Random(5)
    base = [(1, 1, 2, 3), (2, 2, 2, 2), (0, 1, 1, 3), (3, 3, 1, 0), (0, 0, 0, 1)]
    table: dict[Any, int] = {}
    seqs: list[tuple[int, ...]] = []
    for s in base:
        for _ in range(4):
            p = list(s)
            rng.shuffle(p)
            if tuple(p) not in seqs:
                seqs.append(tuple(p))

    def lab(s: tuple[int, ...], k: int) -> int:
        return table.setdefault((tuple(sorted(s)), s[k]), rng.randrange(3))

    labels: list[Any] = [lab(s, 3) if task == "next-token" else tuple(lab(s, k) for k in range(4))
                         for s in seqs]
    if inputs == "token-ids":
        return Dataset(task, "token-ids", tuple(seqs), tuple(labels), vocab_size=4)  # type: ignore[arg-type]
    vec = {t: (Fraction(t, 2), Fraction(-t * t, 3)) for t in range(4)}
    return Dataset(task, "vectors", tuple(tuple(vec[t] for t in s) for s in seqs),  # type: ignore[arg-type]
                   tuple(labels), dim=2)


@pytest.mark.parametrize("inputs", ["token-ids", "vectors"])
@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
def test_repeated_tokens_and_permutations(task: str, inputs: str) -> None:
    ds = _permuted_dataset(task, inputs)
    outcome = certify(ds, NEXT if task == "next-token" else S2S)
    assert outcome.report.verified, outcome.report.failures[:5]


def test_inconsistent_dataset_refused_naming_both() -> None:
    ds = Dataset("next-token", "token-ids", ((1, 2, 3), (0, 0, 1), (2, 1, 3)), (0, 1, 1),
                 vocab_size=4)
    with pytest.raises(InconsistentLabelsError, match="sequences 0 and 2"):
        certify(ds, NEXT)
    s2s = Dataset("seq2seq", "token-ids", ((1, 2), (2, 1)), ((0, 1), (1, 1)), vocab_size=3)
    with pytest.raises(InconsistentLabelsError, match="sequences 0 and 1"):
        certify(s2s, S2S)


def test_wrong_task_refused() -> None:
    ds = generate("seq2seq", N=5, n=3, vocab=4, classes=2, seed=0)
    with pytest.raises(ConstructionError):
        get(NEXT).build(ds, {})


def _tamper(cert: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Change one nonzero weight of the last feed-forward block; re-digest."""
    bad = copy.deepcopy(cert)
    ff = [la for la in bad["network"]["layers"] if la["type"] == "feedforward"][-1]
    spots = [(m, i, j) for m, mp in enumerate(ff["maps"])
             for i, row in enumerate(mp["weight"]) for j, x in enumerate(row) if x != "0"]
    m, i, j = rng.choice(spots)
    old = Fraction(ff["maps"][m]["weight"][i][j])
    ff["maps"][m]["weight"][i][j] = str(old + 1)
    bad["digest"] = digest_of(bad)
    return bad


def test_tampered_weights_rejected() -> None:
    ds = generate("next-token", N=40, n=4, vocab=6, classes=3, seed=3)
    cert = certify(ds, NEXT).certificate
    rng = random.Random(0)
    rejected = sum(not check_certificate(_tamper(cert, rng)).verified for _ in range(8))
    assert rejected == 8


def test_distinguishing_vocabulary_and_weights() -> None:
    rng = random.Random(1)
    multisets = list({tuple(sorted(rng.choices(range(9), k=5))): None for _ in range(200)})
    counters = [Counter(m) for m in multisets]
    a = distinguishing_vocabulary(counters)
    restricted = {tuple(c[t] for t in a) for c in counters}
    assert len(restricted) == len(counters)
    f, _, _ = token_weights(counters, a, rng)
    assert len({sum(c[t] * f[t] for t in a) for c in counters}) == len(counters)


def test_sizes_and_bound() -> None:
    ds = generate("next-token", N=200, n=6, vocab=10, classes=2, seed=4)
    res = get(NEXT).build(ds, {"block_size": 5})
    sz = sizes(res.spec)
    assert sz.width <= 14
    lay = res.params["ff2"]["lemma_c1"][0]
    assert lay["block_size"] == 5
    # embedding + attention + FF2 (projection, Lemma C.1, output map) + E_out
    assert sz.depth == 1 + 1 + (1 + lay["blocks"] + lay["block_size"] * max(lay["rho"], lay["c"])
                                + 4 + 1) + 1
    b = get(NEXT).bound(N=200, n=6, d=10, C=2, inputs="token-ids")  # type: ignore[misc]
    assert b["width"] == 14 and b["theorem"] == "E.1" and b["depth"] > 0


def test_bounded_bits_variant() -> None:
    ds = generate("next-token", N=120, n=4, vocab=8, classes=2, seed=6)
    plain = certify(ds, NEXT)
    small = certify(ds, NEXT, {"block_points": 5})
    assert plain.report.verified and small.report.verified
    assert small.certificate["sizes"]["max_bits"] < plain.certificate["sizes"]["max_bits"]
