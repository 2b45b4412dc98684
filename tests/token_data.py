"""Random token-id datasets shared by the export and precision tests: N distinct sequences
(sorted), labels a function of (multiset, token at the read position), so consistent."""

from __future__ import annotations

import random

from exactmem.model.dataset import Dataset


def token_dataset(seed: int, N: int, n: int, V: int, classes: int,  # noqa: N803
                  task: str = "next-token") -> Dataset:
    rng = random.Random(seed)
    seqs: set[tuple[int, ...]] = set()
    while len(seqs) < N:
        seqs.add(tuple(rng.randrange(V) for _ in range(n)))
    ordered = sorted(seqs)
    table: dict[tuple[object, ...], int] = {}

    def label(seq: tuple[int, ...], k: int) -> int:
        return table.setdefault((tuple(sorted(seq)), seq[k]), rng.randrange(classes))

    if task == "next-token":
        labels: tuple[object, ...] = tuple(label(s, n - 1) for s in ordered)
    else:
        labels = tuple(tuple(label(s, k) for k in range(n)) for s in ordered)
    return Dataset(task, "token-ids", tuple(ordered), labels, vocab_size=V)  # type: ignore[arg-type]
