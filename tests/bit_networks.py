"""Random b-bit integer networks for the bit-CNF tests: weights drawn on the grid, their
exact predictions, and the literals that fix a CNF's weights to them."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import evaluate
from exactmem.search.encode.sat_encoding import encode_bits
from exactmem.search.question.shape import Shape, output_dim, spec_of


def random_network(shape: Shape, bits: int, rng: random.Random, vocab: int, n: int,
                   count: int) -> tuple[Dataset, dict[str, list[list[int]]], list[Any]]:
    """Up to ``count`` random token sequences (labels 0), random ``bits``-bit weights for
    ``shape`` and the network's exact last-position predictions on them."""
    seqs = sorted({tuple(rng.randrange(vocab) for _ in range(n)) for _ in range(count)})
    probe = Dataset("next-token", "token-ids", tuple(seqs), (0,) * len(seqs), vocab_size=vocab)
    problem = encode_bits(probe, shape, bits, symmetry=False)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    values = {name: [[rng.randint(lo, hi) for _ in row] for row in rows]
              for name, rows in problem.weights.items()}
    preds = [p[-1] for p in evaluate(network(shape, probe, values), probe).predictions]
    return probe, values, preds


def network(shape: Shape, ds: Dataset, values: dict[str, list[list[int]]]) -> Any:
    """The integer network with these weights."""
    assert ds.vocab_size is not None
    mats = {name: ScaledMatrix.from_rows([[Fraction(v) for v in row] for row in rows],
                                         cols=len(rows[0]))
            for name, rows in values.items()}
    return spec_of(shape, "token-ids", ds.vocab_size, ds.n, output_dim(ds, shape), mats)


def weight_literals(problem: Any, values: dict[str, list[list[int]]]) -> list[int]:
    """Assumptions fixing every weight of ``problem`` to ``values``."""
    return [b if (values[name][i][j] >> k) & 1 else -b
            for name, rows in problem.weights.items() for i, row in enumerate(rows)
            for j, w in enumerate(row) for k, b in enumerate(w.bits)]
