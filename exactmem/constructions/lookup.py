"""``lookup``: an honest Theta(N)-parameter baseline that memorizes any consistent dataset.

Pipeline (``E_out o FF_2 o L o UA o FF_1 o E_in``, with no positional encoding):

1. every distinct token ``t`` gets an identifier ``id(t) >= 1`` and a random integer weight
   ``f(t)``, resampled until the sums ``sum_k f(x_k)`` are pairwise distinct over the
   distinct multisets of the dataset (checked exactly; Schwartz-Zippel makes a range of
   ``~N^2`` succeed quickly).  Token ids are embedded as ``(f(t), id(t), 0)``; vector tokens
   are first projected to a scalar ``p(x) = w.x + b`` whose distinct values are >= 1 apart
   (random integer direction, exact gap), and a point-indicator bank maps ``p(x)`` to
   ``(f, id, 0)``;
2. one uniform-attention layer (zero query/key weights, value ``e_1``, output ``e_3``,
   residual) writes the mean ``(1/n) sum_k f(x_k)`` into the third coordinate — the
   contextual mapping of Kajitsuka & Sato eq. (52)-(53);
3. a linear map forms the integer context id ``c = B * n * mean + id(x_k)`` with
   ``B = max id + 1``, injective in (multiset, token at the read position);
4. a point-indicator bank with one tent per distinct context returns its label.

Size: ``3 M`` hidden units for ``M`` distinct contexts (``M <= N`` next-token,
``M <= N n`` seq2seq), i.e. about ``9 M`` nonzero parameters, plus ``9 V`` for ``V``
distinct vector tokens.  Requires label consistency (eq. 5 / eq. 10).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.constructions._indicators import point_indicator_bank
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import distinct_tokens, multiset_key, require_consistent
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    Head,
    Layer,
    Linear,
    NetworkSpec,
    Readout,
)

MAX_TRIES = 50


def _token_weights(ds: Dataset, tokens: list[Any], rng: random.Random) -> dict[Any, int]:
    """Random integer weights whose multiset sums are pairwise distinct (exact check)."""
    multisets = list({multiset_key(s): None for s in ds.sequences})
    K = max(16, 2 * len(multisets) ** 2)
    for _ in range(MAX_TRIES):
        f = {t: rng.randint(1, K) for t in tokens}
        sums = {sum(f[t] for t in ms) for ms in multisets}
        if len(sums) == len(multisets):
            return f
    raise ConstructionError(f"no injective token weights found in {MAX_TRIES} tries")


def _projection(tokens: list[tuple[Fraction, ...]], rng: random.Random,
                ) -> tuple[list[Fraction], Fraction, list[Fraction]]:
    """``w, b`` with ``w.x + b >= 1`` and distinct tokens >= 1 apart; also the values."""
    d = len(tokens[0])
    K = max(8, len(tokens) ** 2)
    for _ in range(MAX_TRIES):
        g = [rng.randint(-K, K) for _ in range(d)]
        vals = sorted(sum((gi * xi for gi, xi in zip(g, t, strict=True)), Fraction(0))
                      for t in tokens)
        gap = min((b - a for a, b in zip(vals, vals[1:], strict=False)), default=Fraction(1))
        if gap > 0:
            w = [Fraction(gi) / gap for gi in g]
            lo = vals[0] / gap
            b = 1 - lo
            proj = [sum((wi * xi for wi, xi in zip(w, t, strict=True)), Fraction(0)) + b
                    for t in tokens]
            return w, b, proj
    raise ConstructionError(f"no separating projection found in {MAX_TRIES} tries")


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """Build the lookup network for ``ds`` (see the module docstring)."""
    require_consistent(ds)
    seed = int(options.get("seed", 0))
    rng = random.Random(seed)
    tokens = distinct_tokens(ds)
    f = _token_weights(ds, tokens, rng)
    layers: list[Layer] = []
    if ds.inputs == "token-ids":
        assert ds.vocab_size is not None
        ids = {t: t + 1 for t in tokens}
        table = [[0] * ds.vocab_size for _ in range(3)]
        for t in tokens:
            table[0][t], table[1][t] = f[t], ids[t]
        layers.append(Embedding(ScaledMatrix.from_rows(table)))
        input_dim = ds.vocab_size
    else:
        assert ds.dim is not None
        ids = {t: j + 1 for j, t in enumerate(tokens)}
        w, b, proj = _projection(tokens, rng)
        layers.append(Linear(Affine(ScaledMatrix.row(w), ScaledMatrix.column([b]))))
        layers.append(point_indicator_bank(proj, [(f[t], ids[t], 0) for t in tokens]))
        input_dim = ds.dim
    zero = ScaledMatrix.zeros(1, 3)
    head = Head(query=zero, key=zero, value=ScaledMatrix.row([1, 0, 0]),
                output=ScaledMatrix.column([0, 0, 1]))
    layers.append(Attention((head,), kind="uniform", residual=True))
    B = max(ids.values()) + 1
    layers.append(Linear(Affine(ScaledMatrix.row([0, 1, B * ds.n]))))
    contexts: dict[int, int] = {}
    positions = (ds.n - 1,) if ds.task == "next-token" else tuple(range(ds.n))
    for i, seq in enumerate(ds.sequences):
        total = sum(f[t] for t in seq)
        for k, y in zip(positions, ds.position_labels(i), strict=True):
            contexts.setdefault(B * total + ids[seq[k]], y)
    points = list(contexts)
    layers.append(point_indicator_bank([Fraction(c) for c in points],
                                       [(contexts[c],) for c in points]))
    spec = NetworkSpec(
        input_kind=ds.inputs, input_dim=input_dim, seq_len=ds.n, layers=tuple(layers),
        readout=Readout("scalar", "last" if ds.task == "next-token" else "every"))
    return BuildResult(spec=spec, params={"seed": seed, "contexts": len(points),
                                          "distinct_tokens": len(tokens)})


CONSTRUCTION = Construction(
    name="lookup",
    summary="Theta(N) baseline: uniform attention for a context id, one indicator per context",
    reference="baseline (contextual mapping as in Kajitsuka & Sato 2025, eq. 52-53)",
    tasks=("next-token", "seq2seq"),
    inputs=("token-ids", "vectors"),
    build=build,
    options=(Option("seed", int, 0, "random seed for token weights and projections"),),
)
