"""Seeded uniform token data the checker regenerates (standard library only;
docs/dataset-format.md, "Generated datasets"; docs/memorized-bits.md).

A dataset may record the generator it was drawn with, ``"generator": {"name":
"exactmem.uniform-tokens/1", "seed": S, "vocab": V, "sequences": N, "length": L}``: ``N``
rows of ``L`` tokens, each token uniform over ``0 .. V-1`` and independent of the others
(SHA-256 taken as a random function), the dataset being the next-token dataset of the rows
(inputs ``t_0 .. t_{L-2}``, labels ``t_1 .. t_{L-1}``, ``vocab_size = V``).  Token ``k`` of
row ``i``: for ``a = 0, 1, ...`` the first 8 bytes of

    SHA-256(b"exactmem.uniform-tokens/1" || S || i || k || a)

(each of ``S, i, k, a`` as 8 bytes, big-endian) read as a big-endian integer ``u < 2**64``;
the first ``u`` below ``2**64 - (2**64 mod V)`` (a multiple of ``V``) gives the token
``u mod V``.  Rejection keeps it exactly uniform (no modulo bias); a draw is rejected with
probability below ``V / 2**64``.

When the dataset's tokens and labels equal the regenerated ones exactly, the uniform
distribution over ``V`` tokens is the data's true distribution, and the bits the model's code
saves over the uniform code are Morris et al.'s memorized bits.  A recorded generator the
data does not match is a false statement about the data: the certificate is rejected
(never silently read as data without a generator).  Cost: ``N L`` hashes (plus rejected
draws), at most :data:`MAX_TOKENS` tokens (about 4 million; some 1.3 s a million
here).
"""

import hashlib
from typing import Any

from ..verdict import Unusable

NAME = "exactmem.uniform-tokens/1"
MAX_TOKENS = 1 << 22  # N * L: one hash a token, about 1.3 us each here (6 s at the limit)
_TOP = 1 << 64


def row(seed: int, i: int, length: int, vocab: int) -> list[int]:
    """Row ``i``: its ``length`` tokens as the generator with ``seed`` draws them."""
    limit = _TOP - _TOP % vocab
    head = hashlib.sha256(NAME.encode() + seed.to_bytes(8, "big") + i.to_bytes(8, "big"))
    out = []
    for k in range(length):
        at = head.copy()
        at.update(k.to_bytes(8, "big"))
        a = 0
        while True:
            h = at.copy()
            h.update(a.to_bytes(8, "big"))
            u = int.from_bytes(h.digest()[:8], "big")
            if u < limit:
                out.append(u % vocab)
                break
            a += 1
    return out


def rows(seed: int, vocab: int, sequences: int, length: int) -> list[list[int]]:
    """The ``sequences`` rows of ``length`` tokens the generator draws."""
    return [row(seed, i, length, vocab) for i in range(sequences)]


def mismatch(gen: dict[str, Any], toks: list[Any], labels: list[Any], size: int) -> str | None:
    """None when the dataset ``(toks, labels, size)`` is exactly the next-token dataset of
    the rows of the generator ``gen`` (its fields already read by the dataset grammar);
    else the failure text naming the first difference and how many sequences differ."""
    seed, vocab, count, length = gen["seed"], gen["vocab"], gen["sequences"], gen["length"]
    if count * length > MAX_TOKENS:
        raise Unusable(f"dataset.generator: {count} x {length} tokens to regenerate, more "
                       f"than the limit of {MAX_TOKENS} (MAX_TOKENS)")
    where = "dataset.generator"
    if vocab != size:
        return f"{where}: vocab {vocab}, but the dataset's vocab_size is {size}"
    if count != len(toks) or length != len(toks[0]) + 1:
        return (f"{where}: {count} sequences of {length} tokens, but the dataset holds "
                f"{len(toks)} sequences of {len(toks[0])} inputs and their next tokens")
    first, bad = "", 0
    for i in range(count):
        drawn = row(seed, i, length, vocab)
        if drawn[:-1] != list(toks[i]) or drawn[1:] != list(labels[i]):
            bad += 1
            if not first:
                k = next(k for k in range(length) if
                         (k < length - 1 and toks[i][k] != drawn[k]) or
                         (k > 0 and labels[i][k - 1] != drawn[k]))
                first = f"sequence {i}, token {k}: the generator draws {drawn[k]}"
    if not bad:
        return None
    return (f"{where}: the data is not what {NAME} draws from seed {seed} ({bad} of "
            f"{count} sequences differ; first: {first})")
