"""Random datasets that satisfy the assumptions of the softmax-attention constructions.

``generate_for(construction, seed=..., **kw) -> Dataset``:

* ``mahdavi2024-mha`` (Mahdavi et al. 2024): vector sequences ``[e, x_1..x_n]`` (a query token
  then ``n`` context tokens, ``n < d``), dyadic rational entries in ``[-1, 1]``; every context
  has rank ``n`` (Assumption 2) and the queries are drawn until every ``n`` of them are
  independent (Assumption 1, checked exhaustively when feasible); ``shared_context=True``
  repeats one context (their "fixed" setting).  Integer labels in ``[0, classes)``.
  Defaults: ``n = 3``, ``dim = n + 2``, ``heads = 2``, ``head_dim = n``,
  ``N = H (min(n, d_h) - 1) + 1``.
* ``dana2024-aot`` (Dana et al. 2025): token-id sequences of length ``n`` (default 2, the
  bigram task), ``N`` distinct sequences with a random next token each (Assumption 1,
  association).  Constant sequences ``(a, a, ...)`` are not drawn: without positional
  embeddings their features are linear in ``e(a)``, so at most ``d`` of them can be fitted.
  Defaults: ``heads = 2``, ``head_dim = dim = 2``, ``N = H d_h + d``,
  ``vocab`` large enough for ``N`` distinct sequences.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from typing import Any

from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset

DENOM = 8


def _rank(rows: list[tuple[Fraction, ...]]) -> int:
    """Rank over Q by Gaussian elimination on Fractions (small matrices only)."""
    m = [list(r) for r in rows]
    rk, cols = 0, len(m[0]) if m else 0
    for c in range(cols):
        piv = next((i for i in range(rk, len(m)) if m[i][c] != 0), None)
        if piv is None:
            continue
        m[rk], m[piv] = m[piv], m[rk]
        for i in range(len(m)):
            if i != rk and m[i][c] != 0:
                f = m[i][c] / m[rk][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[rk], strict=True)]
        rk += 1
    return rk


def _vec(rng: random.Random, d: int) -> tuple[Fraction, ...]:
    return tuple(Fraction(rng.randint(-DENOM, DENOM), DENOM) for _ in range(d))


def _context(rng: random.Random, n: int, d: int) -> tuple[tuple[Fraction, ...], ...]:
    while True:
        ctx = tuple(_vec(rng, d) for _ in range(n))
        if _rank(list(ctx)) == n:
            return ctx


def _queries(rng: random.Random, N: int, n: int, d: int,
             limit: int = 20000) -> list[tuple[Fraction, ...]]:
    """N queries, every n of them independent (checked on all n-subsets up to ``limit``)."""
    qs: list[tuple[Fraction, ...]] = []
    while len(qs) < N:
        cand = _vec(rng, d)
        k = min(n - 1, len(qs))
        ok = True
        if math.comb(len(qs), k) <= limit:
            for sub in itertools.combinations(range(len(qs)), k):
                if _rank([qs[i] for i in sub] + [cand]) < k + 1:
                    ok = False
                    break
        if ok:
            qs.append(cand)
    return qs


def mahdavi_dataset(*, seed: int = 0, N: int | None = None, n: int | None = None,
                    dim: int | None = None, classes: int | None = None, heads: int | None = None,
                    head_dim: int | None = None, shared_context: bool = False) -> Dataset:
    """A dataset for ``mahdavi2024-mha`` (see the module docstring)."""
    ctx_n = n or 3
    d = dim or ctx_n + 2
    if not ctx_n < d:
        raise DatasetError(f"mahdavi2024-mha needs context size n < d, found n = {ctx_n}, "
                           f"d = {d}")
    H, dh = heads or 2, head_dim or ctx_n
    count = N or H * (min(ctx_n, dh) - 1) + 1
    rng = random.Random(seed)
    qs = _queries(rng, count, ctx_n, d)
    shared = _context(rng, ctx_n, d) if shared_context else None
    seqs = tuple((q, *(shared or _context(rng, ctx_n, d))) for q in qs)
    labels = tuple(rng.randrange(classes or 4) for _ in qs)
    return Dataset("next-token", "vectors", seqs, labels, dim=d)


def dana_dataset(*, seed: int = 0, N: int | None = None, n: int | None = None,
                 dim: int | None = None, vocab: int | None = None, heads: int | None = None,
                 head_dim: int | None = None) -> Dataset:
    """A dataset for ``dana2024-aot`` (see the module docstring)."""
    S = n or 2
    d = dim or 2
    H, dh = heads or 2, head_dim or d
    count = N or H * dh + d
    V = vocab or max(4, math.ceil(count ** (1 / S)) + 2)
    available = V ** S - (V if S > 1 else 0)
    if available < count:
        raise DatasetError(f"only {available} distinct non-constant sequences of length {S} "
                           f"over {V} tokens, {count} requested")
    rng = random.Random(seed)
    seen: set[tuple[int, ...]] = set()
    seqs: list[tuple[int, ...]] = []
    while len(seqs) < count:
        s = tuple(rng.randrange(V) for _ in range(S))
        if s not in seen and (S == 1 or len(set(s)) > 1):
            seen.add(s)
            seqs.append(s)
    labels = tuple(rng.randrange(V) for _ in seqs)
    return Dataset("next-token", "token-ids", tuple(seqs), labels, vocab_size=V)


def generate_for(construction: str, *, seed: int = 0, **kw: Any) -> Dataset:
    """A random dataset satisfying ``construction``'s assumptions, with ``N`` equal to the
    theorem's capacity by default.  Keywords: ``N, n, dim, classes, heads, head_dim``
    (``mahdavi2024-mha``, plus ``shared_context``), ``N, n, dim, vocab, heads, head_dim``
    (``dana2024-aot``); unknown keywords are refused."""
    if construction == "mahdavi2024-mha":
        allowed = {"N", "n", "dim", "classes", "heads", "head_dim", "shared_context"}
        fn: Any = mahdavi_dataset
    elif construction == "dana2024-aot":
        allowed = {"N", "n", "dim", "vocab", "heads", "head_dim"}
        fn = dana_dataset
    else:
        raise DatasetError(f"no attention dataset generator for {construction!r}; "
                           f"available: mahdavi2024-mha, dana2024-aot")
    extra = set(kw) - allowed
    if extra:
        raise DatasetError(f"{construction}: unknown generator options {sorted(extra)}; "
                           f"allowed: {sorted(allowed)}")
    ds: Dataset = fn(seed=seed, **kw)
    return ds
