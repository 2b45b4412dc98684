"""Random datasets: distinct sequences, labels consistent by default.

Consistent labels depend only on (multiset of tokens, token at the read position), so
they satisfy Kajitsuka & Sato eq. (5) (next-token) or eq. (10) (seq2seq).
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset, Task


def random_vocabulary(size: int, dim: int, rng: random.Random) -> list[tuple[Fraction, ...]]:
    """``size`` distinct vectors with entries ``p/q``, ``|p| <= 8``, ``q in {1, 2, 4}``."""
    if size > 33 ** dim:  # these p/q take 33 distinct values
        raise DatasetError(f"cannot draw {size} distinct vectors of dimension {dim}")
    seen: dict[tuple[Fraction, ...], None] = {}
    while len(seen) < size:
        v = tuple(Fraction(rng.randint(-8, 8), rng.choice((1, 2, 4))) for _ in range(dim))
        seen.setdefault(v, None)
    return list(seen)


def generate(task: Task, N: int, n: int, vocab: int, classes: int, seed: int = 0,  # noqa: N803
             dim: int | None = None, consistent: bool = True) -> Dataset:
    """N distinct random sequences of length n over ``vocab`` tokens (ids or ``dim``-vectors)."""
    if N < 1 or n < 1 or vocab < 1 or classes < 1:
        raise DatasetError("N, n, vocab and classes must be positive")
    if vocab ** n < N:
        raise DatasetError(f"only {vocab}^{n} = {vocab ** n} distinct sequences exist; "
                           f"cannot draw N = {N}")
    rng = random.Random(seed)
    seqs: dict[tuple[int, ...], None] = {}
    while len(seqs) < N:
        seqs.setdefault(tuple(rng.randrange(vocab) for _ in range(n)), None)
    ids = list(seqs)
    table: dict[Any, int] = {}

    def label(seq: tuple[int, ...], k: int) -> int:
        if not consistent:
            return rng.randrange(classes)
        return table.setdefault((tuple(sorted(seq)), seq[k]), rng.randrange(classes))

    labels: list[Any] = []
    for s in ids:
        if task == "next-token":
            labels.append(label(s, n - 1))
        else:
            labels.append(tuple(label(s, k) for k in range(n)))
    if dim is None:
        return Dataset(task, "token-ids", tuple(ids), tuple(labels), vocab_size=vocab)
    words = random_vocabulary(vocab, dim, rng)
    vecs = tuple(tuple(words[t] for t in s) for s in ids)
    return Dataset(task, "vectors", vecs, tuple(labels), dim=dim)
