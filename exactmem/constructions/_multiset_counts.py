"""Lemma B.1's greedy distinguishing vocabulary and the token weights, on numpy counts.

Kajitsuka & Sato (ICLR 2025) Thm B.1 keys a sequence by the multiset of its tokens.  The
reference forms (:func:`~exactmem.constructions.kajitsuka2025_next_token.distinguishing_vocabulary`
and ``token_weights``) walk one ``Counter`` a multiset; here the ``M`` distinct multisets are
the rows of an ``M x n`` array of token slots, a token's count in every multiset is one
comparison over it, and the greedy is run as rounds of one sort each:

* every round ranks the rows still in play by ``(key, row)``, where the key is the row's
  counts of the tokens chosen so far (kept as a class number).  The first row whose key an
  earlier row has is exactly where the reference greedy meets its next collision (every row
  before it has a key of its own), and the earlier row is the first of its class;
* the token chosen there is the reference's: the first by ``repr`` whose counts differ;
* a row alone in its class stays alone (a new token only splits classes), so it leaves play.

Both give the same tokens, the same weights from the same random draws and the same sums
(``tests/constructions/test_multiset_counts.py`` compares them).  Exact throughout: counts,
keys and weighted sums are int64 integers; where a key or a sum could pass ``2^62``
(:func:`fits`, :meth:`MultisetCounts.token_weights`) the reference forms are used.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from exactmem.errors import ConstructionError

MAX_ENTRIES = 1 << 27  # entries of the token-major count matrix kept at once (bytes: 1 each)
EXACT_SUM = 1 << 62  # weighted sums below this are exact in int64


def fits(multisets: int, n: int) -> bool:
    """Whether the greedy's ``(class, row)`` keys stay in int64: a class is below
    ``M (n + 1) + n + 1`` and a key below ``M`` times that."""
    return multisets * multisets * (n + 2) < EXACT_SUM


class MultisetCounts:
    """The counts of each token in each of the distinct multisets ``keys`` (sorted tuples
    of tokens, one per distinct multiset, in first-appearance order); ``tokens``: every
    token of the dataset, in first-appearance order (its slot is its position); for
    ``fits(len(keys), n)`` only."""

    def __init__(self, keys: Sequence[tuple[Any, ...]], tokens: Sequence[Any], n: int) -> None:
        self.keys = keys
        self.n = n
        self.slot = {t: h for h, t in enumerate(tokens)}
        self.rank = {t: r for r, t in enumerate(sorted(tokens, key=repr))}
        M, V = len(keys), len(tokens)  # noqa: N806
        if not fits(M, n):
            raise ValueError(f"{M} multisets of {n} tokens: the greedy's keys could pass int64")
        dtype = np.uint8 if V <= 1 << 8 else np.uint16 if V <= 1 << 16 else np.uint32
        flat = chain.from_iterable(keys)
        if all(type(t) is int and 0 <= t < 1 << 24 for t in tokens):  # token ids: a table
            top = max(tokens)
            lut = np.zeros(top + 1, dtype=dtype)
            lut[np.array(tokens, dtype=np.int64)] = np.arange(V)
            raw = np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.uint32
            slots = lut[np.fromiter(flat, raw, count=M * n)]
        else:
            slots = np.fromiter(map(self.slot.__getitem__, flat), dtype, count=M * n)
        self.rows = slots.reshape(M, n)
        self.counts: np.ndarray | None = None  # token-major (V x M) counts, when small enough
        if V * M <= MAX_ENTRIES and n < 1 << 8:
            counts = np.zeros(V * M, np.uint8)
            at = np.arange(M, dtype=np.int64)
            for k in range(n):  # one index per row within a column: no index repeats
                counts[self.rows[:, k].astype(np.int64) * M + at] += 1
            self.counts = counts.reshape(V, M)
        self._cache: dict[int, np.ndarray] = {}

    def count(self, token: Any) -> np.ndarray:
        """``m(token)`` for every multiset (int64)."""
        h = self.slot[token]
        col = self._cache.get(h)
        if col is None:
            col = self.counts[h].astype(np.int64) if self.counts is not None else \
                np.count_nonzero(self.rows == h, axis=1).astype(np.int64)
            self._cache[h] = col
        return col

    def distinguishing_vocabulary(self) -> list[Any]:
        """Lemma B.1's greedy token set, the reference's tokens in its order."""
        M = len(self.keys)  # noqa: N806
        chosen: list[Any] = []
        active = np.arange(M, dtype=np.int64)  # rows that may still meet an equal key
        cls = np.zeros(M, dtype=np.int64)  # their class: equal keys, equal class
        while len(active) > 1:
            size = len(active)
            ranked = np.sort(cls * size + np.arange(size, dtype=np.int64))
            of = ranked // size
            pos = ranked - of * size
            first = np.empty(size, dtype=bool)
            first[0] = True
            np.not_equal(of[1:], of[:-1], out=first[1:])
            group = np.cumsum(first) - 1
            members = np.bincount(group)
            if len(members) == size:  # every key its own: the reference meets no collision
                break
            p = int(pos[~first].min())  # the first row whose key an earlier row has
            by_pos = np.empty(size, dtype=np.int64)
            by_pos[pos] = group
            q = int(pos[np.flatnonzero(first)[by_pos[p]]])  # the first row of its class
            token = self._splitting_token(int(active[p]), int(active[q]))
            chosen.append(token)
            keep = members[by_pos] > 1
            active = active[keep]
            cls = by_pos[keep] * (self.n + 1) + self.count(token)[active]
        if not chosen:
            chosen.append(self.keys[0][0])  # the reference's first token of the first multiset
        return chosen

    def _splitting_token(self, i: int, j: int) -> Any:
        a, b = self.keys[i], self.keys[j]
        return min((t for t in {*a, *b} if a.count(t) != b.count(t)), key=self.rank.__getitem__)

    def token_weights(self, vocab: list[Any], rng: random.Random, tries: int,
                      ) -> tuple[dict[Any, int], int, list[int]] | None:
        """The reference's ``token_weights`` (the same draws from ``rng``); ``None`` (and no
        draw made) when a sum could reach ``2^62``."""
        M = len(self.keys)  # noqa: N806
        K = max(16, M ** 2)  # noqa: N806
        if self.n * K >= EXACT_SUM:
            return None
        for _ in range(tries):
            f = {t: rng.randint(1, K) for t in vocab}
            sums = np.zeros(M, dtype=np.int64)
            for t, w in f.items():
                sums += self.count(t) * w
            if len(np.unique(sums)) == M:
                return f, K, sums.tolist()
        raise ConstructionError(f"no injective token weights in {tries} draws from 1..{K}")


__all__ = ["MultisetCounts", "fits"]
