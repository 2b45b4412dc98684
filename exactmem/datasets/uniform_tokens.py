"""Uniform random token data drawn from a seed, recorded in the dataset so that the checker
can regenerate it (docs/dataset-format.md, "Generated datasets"; docs/memorized-bits.md).

``exactmem.uniform-tokens/1``: token ``k`` of row ``i`` is, for the first ``a = 0, 1, ...``
whose draw is accepted, ``u mod V`` with ``u`` the first 8 bytes (big-endian) of
``SHA-256(b"exactmem.uniform-tokens/1" || seed || i || k || a)`` (each number 8 bytes,
big-endian), accepted when ``u < 2**64 - (2**64 mod V)``: exactly uniform over ``V`` tokens
(rejection sampling, no modulo bias).  The rows become a next-token dataset (inputs
``t_0 .. t_{L-2}``, labels ``t_1 .. t_{L-1}``) that records the generator.  The checker's
own implementation (:mod:`exactmem.checker.lm.lm_uniform`) is separate; a test holds the
two together.
"""

from __future__ import annotations

import hashlib

from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset

NAME = "exactmem.uniform-tokens/1"
MAX_SEED = (1 << 64) - 1
MAX_VOCAB = 1 << 32
MAX_TOKENS = 1 << 22  # what the checker regenerates (lm_uniform.MAX_TOKENS)


def uniform_rows(seed: int, vocab: int, sequences: int, length: int) -> list[list[int]]:
    """``sequences`` rows of ``length`` tokens drawn uniformly over ``vocab`` from ``seed``."""
    top = 1 << 64
    limit = top - top % vocab
    prefix = hashlib.sha256(NAME.encode() + seed.to_bytes(8, "big"))
    out = []
    for i in range(sequences):
        row_hash = prefix.copy()
        row_hash.update(i.to_bytes(8, "big"))
        row = []
        for k in range(length):
            at = row_hash.copy()
            at.update(k.to_bytes(8, "big"))
            a = 0
            while True:
                h = at.copy()
                h.update(a.to_bytes(8, "big"))
                u = int.from_bytes(h.digest()[:8], "big")
                if u < limit:
                    row.append(u % vocab)
                    break
                a += 1
        out.append(row)
    return out


def uniform_dataset(seed: int, vocab: int, sequences: int, length: int) -> Dataset:
    """The next-token dataset of :func:`uniform_rows`, recording its generator: ``sequences``
    sequences of ``length - 1`` positions, each labelled with the token that follows."""
    if not 0 <= seed <= MAX_SEED:
        raise DatasetError(f"seed: expected an integer in [0, 2^64), found {seed}")
    if not 1 <= vocab <= MAX_VOCAB:
        raise DatasetError(f"vocab: expected an integer in [1, 2^32], found {vocab}")
    if sequences < 1 or length < 2:
        raise DatasetError(f"expected at least 1 sequence of at least 2 tokens, found "
                           f"{sequences} of {length}")
    if sequences * length > MAX_TOKENS:
        raise DatasetError(f"{sequences} x {length} tokens: more than the checker regenerates "
                           f"({MAX_TOKENS})")
    rows = uniform_rows(seed, vocab, sequences, length)
    gen = {"name": NAME, "seed": seed, "vocab": vocab, "sequences": sequences,
           "length": length}
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=vocab,
                   sequences=tuple(tuple(r[:-1]) for r in rows),
                   labels=tuple(tuple(r[1:]) for r in rows), generator=gen)
