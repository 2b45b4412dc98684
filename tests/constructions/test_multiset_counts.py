"""Lemma B.1's greedy and the token weights on numpy counts against the Counter forms."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction
from typing import Any

import pytest

from exactmem.constructions import _multiset_counts
from exactmem.constructions._multiset_counts import MultisetCounts
from exactmem.constructions.kajitsuka2025_next_token import (
    MAX_TRIES,
    _vocabulary_and_weights,
    distinguishing_vocabulary,
    token_weights,
)


def _keys(rng: random.Random, alphabet: list[Any], n: int, count: int) -> list[tuple[Any, ...]]:
    """Distinct multisets (sorted tuples) in first-drawn order."""
    seen = {tuple(sorted(rng.choices(alphabet, k=n))): None for _ in range(count)}
    return list(seen)


def _first_seen(keys: list[tuple[Any, ...]], rng: random.Random) -> list[Any]:
    tokens = list(dict.fromkeys(t for k in keys for t in k))
    rng.shuffle(tokens)  # the slots' order is not the tokens' order
    return tokens


def _same(keys: list[tuple[Any, ...]], tokens: list[Any], n: int, seed: int) -> None:
    counters = [Counter(k) for k in keys]
    want = distinguishing_vocabulary(counters)
    counts = MultisetCounts(keys, tokens, n)
    got = counts.distinguishing_vocabulary()
    assert got == want
    mine, theirs = random.Random(seed), random.Random(seed)
    weights = counts.token_weights(got, mine, MAX_TRIES)
    assert weights is not None
    assert weights == token_weights(counters, want, theirs)
    assert mine.getstate() == theirs.getstate()


@pytest.mark.parametrize("seed", range(6))
def test_ids_as_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = list(range(rng.choice([3, 12, 40])))  # 12 and 40: repr order is not int order
    n = rng.choice([2, 5, 9])
    keys = _keys(rng, alphabet, n, 400)
    _same(keys, _first_seen(keys, rng), n, seed)


@pytest.mark.parametrize("seed", range(3))
def test_other_tokens_as_the_reference(seed: int) -> None:
    rng = random.Random(100 + seed)
    alphabet: list[Any] = [(Fraction(rng.randint(-9, 9), rng.randint(1, 4)),) for _ in range(15)]
    n = 4
    keys = _keys(rng, alphabet, n, 300)
    _same(keys, _first_seen(keys, rng), n, seed)


def test_per_column_counts_and_the_int64_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    keys = _keys(rng, list(range(20)), 6, 300)
    tokens = _first_seen(keys, rng)
    monkeypatch.setattr(_multiset_counts, "MAX_ENTRIES", 0)  # no count matrix: one column at a time
    counts = MultisetCounts(keys, tokens, 6)
    assert counts.counts is None
    assert counts.distinguishing_vocabulary() == distinguishing_vocabulary(
        [Counter(k) for k in keys])
    monkeypatch.setattr(_multiset_counts, "EXACT_SUM", 6 * len(keys) ** 2)  # sums may overflow
    state = random.Random(1)
    before = state.getstate()
    assert counts.token_weights([0, 1], state, MAX_TRIES) is None
    assert state.getstate() == before  # no draw made: the reference draws the same


def test_one_multiset_and_repeats() -> None:
    assert MultisetCounts([(3, 3, 5)], [5, 3], 3).distinguishing_vocabulary() == \
        distinguishing_vocabulary([Counter((3, 3, 5))])
    keys = [(0, 0, 1), (0, 1, 1), (1, 1, 1), (0, 0, 0)]
    assert MultisetCounts(keys, [1, 0], 3).distinguishing_vocabulary() == \
        distinguishing_vocabulary([Counter(k) for k in keys])


def test_keys_that_could_pass_int64_take_the_counter_forms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(9)
    keys = _keys(rng, list(range(15)), 5, 200)
    tokens = _first_seen(keys, rng)
    fast = _vocabulary_and_weights(keys, tokens, 5, random.Random(3))
    monkeypatch.setattr(_multiset_counts, "EXACT_SUM", len(keys) ** 2 * 7)  # M^2 (n + 2)
    assert not _multiset_counts.fits(len(keys), 5)
    with pytest.raises(ValueError, match="int64"):
        MultisetCounts(keys, tokens, 5)
    assert _vocabulary_and_weights(keys, tokens, 5, random.Random(3)) == fast
