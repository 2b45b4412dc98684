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

Float-ready variant (``max_bits = P > 0``, token ids only): every weight and every
intermediate value of the forward pass is an integer of magnitude below ``2^P``, so the
pass run in ``P``-bit floating point (float32: ``P = 24``) is *exact*, in any summation
order.  Token ``t`` embeds as ``(n f(t), h(t), 0)`` with small random integers ``f, h``;
the uniform attention then yields the integer ``sum_k f(x_k)`` exactly (``n f`` summed, divided
by ``n``: the ``1/n`` never rounds); the context id is ``c = sum_k f(x_k) + h(x_read)``,
resampled (growing the range) until contexts with different labels get different ids; and
the indicator bank is a bump bank ``relu(1 - relu(c - p) - relu(p - c))`` whose units are
all zero away from their point, so no large cancelling terms are ever summed.  Cost: the
bump bank has three affine maps (``2 M``, ``M x 2 M``, ``M``), about ``8 M`` nonzero
parameters but ``2 M^2`` dense entries.
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
from exactmem.model.dataset_checks import distinct_tokens, multiset_keys, require_consistent
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    Linear,
    NetworkSpec,
    Readout,
)

MAX_TRIES = 50


def _token_weights(ds: Dataset, tokens: list[Any], rng: random.Random) -> dict[Any, int]:
    """Random integer weights whose multiset sums are pairwise distinct (exact check)."""
    multisets = list(dict.fromkeys(multiset_keys(ds)))
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
    max_bits = int(options.get("max_bits", 0) or 0)
    if max_bits:
        return _build_float_ready(ds, max_bits, rng, seed)
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


def _float_ready_ids(ds: Dataset, tokens: list[Any], contexts: list[tuple[Any, Any, int]],
                     P: int, rng: random.Random) -> tuple[dict[Any, int], dict[Any, int], int]:
    """Random ``f >= 1, h >= 0`` (range growing from ``~M / n``) such that contexts with
    different labels get different ids ``sum f + h``, every value staying below ``2^P``."""
    n = ds.n
    K = 2
    while K * n < len(contexts):
        K *= 2
    limit = 1 << P
    while True:
        if n * n * K >= limit:
            raise ConstructionError(
                f"max_bits = {P}: {len(contexts)} contexts of length n = {n} need token weights "
                f"above 2^{P} / n^2; raise --max-bits")
        for _ in range(MAX_TRIES):
            f = {t: rng.randint(1, K) for t in tokens}
            h = {t: rng.randint(0, K - 1) for t in tokens}
            seen: dict[int, int] = {}
            ok = True
            for ms, tok, y in contexts:
                c = sum(f[t] for t in ms) + h[tok]
                if seen.setdefault(c, y) != y:
                    ok = False
                    break
            if ok:
                c_max = max(seen)
                if n * max(sum(f[t] for t in ms) for ms, _, _ in contexts) < limit and \
                        c_max + 1 < limit:
                    return f, h, len(seen)
        K *= 2


def _bump_bank(points: list[int], values: list[int]) -> FeedForward:
    """``x -> values[j]`` at ``x = points[j]`` (integers, distinct) through
    ``sum_j v_j relu(1 - relu(x - p_j) - relu(p_j - x))``: every unit is 0 away from its point."""
    M = len(points)
    first = Affine(ScaledMatrix.from_rows([[s] for _ in points for s in (1, -1)]),
                   ScaledMatrix.column([v for p in points for v in (-p, p)]))
    mid = [[0] * (2 * M) for _ in range(M)]
    for j in range(M):
        mid[j][2 * j] = mid[j][2 * j + 1] = -1
    second = Affine(ScaledMatrix(tuple(tuple(r) for r in mid), 1, 2 * M),
                    ScaledMatrix.column([1] * M))
    third = Affine(ScaledMatrix((tuple(values),), 1, M), None)
    return FeedForward((first, second, third), residual=False)


def _build_float_ready(ds: Dataset, P: int, rng: random.Random, seed: int) -> BuildResult:
    """The ``max_bits = P`` variant (module docstring): exact in ``P``-bit floats."""
    if ds.inputs != "token-ids":
        raise ConstructionError("lookup --max-bits supports token-id datasets only")
    if P < 4:
        raise ConstructionError(f"max_bits must be at least 4, found {P}")
    assert ds.vocab_size is not None
    n = ds.n
    tokens = distinct_tokens(ds)
    positions = (n - 1,) if ds.task == "next-token" else tuple(range(n))
    ctx: dict[tuple[Any, Any], int] = {}
    for i, (seq, ms) in enumerate(zip(ds.sequences, multiset_keys(ds), strict=True)):
        for k, y in zip(positions, ds.position_labels(i), strict=True):
            ctx.setdefault((ms, seq[k]), y)
    contexts = [(ms, tok, y) for (ms, tok), y in ctx.items()]
    if max(y for _, _, y in contexts) >= 1 << P:
        raise ConstructionError(f"max_bits = {P}: a label does not fit in {P} bits")
    f, h, M = _float_ready_ids(ds, tokens, contexts, P, rng)
    table = [[0] * ds.vocab_size for _ in range(3)]
    for t in tokens:
        table[0][t], table[1][t] = n * f[t], h[t]
    zero = ScaledMatrix.zeros(1, 3)
    head = Head(query=zero, key=zero, value=ScaledMatrix.row([1, 0, 0]),
                output=ScaledMatrix.column([0, 0, 1]))
    labels: dict[int, int] = {}
    for ms, tok, y in contexts:
        labels[sum(f[t] for t in ms) + h[tok]] = y
    points = sorted(labels)
    layers: list[Layer] = [
        Embedding(ScaledMatrix.from_rows(table)),
        Attention((head,), kind="uniform", residual=True),
        Linear(Affine(ScaledMatrix.row([0, 1, 1]))),
        _bump_bank(points, [labels[c] for c in points]),
    ]
    spec = NetworkSpec(
        input_kind="token-ids", input_dim=ds.vocab_size, seq_len=n, layers=tuple(layers),
        readout=Readout("scalar", "last" if ds.task == "next-token" else "every"))
    return BuildResult(spec=spec, params={"seed": seed, "max_bits": P, "contexts": M,
                                          "distinct_tokens": len(tokens)},
                       notes=(f"float-ready for {P}-bit floats: every value is an integer "
                              f"below 2^{P}; the largest context id is {points[-1]}",))


CONSTRUCTION = Construction(
    name="lookup",
    summary="Theta(N) baseline: uniform attention for a context id, one indicator per context",
    reference="baseline (contextual mapping as in Kajitsuka & Sato 2025, eq. 52-53)",
    tasks=("next-token", "seq2seq"),
    inputs=("token-ids", "vectors"),
    build=build,
    options=(Option("seed", int, 0, "random seed for token weights and projections"),
             Option("max_bits", int, 0, "build for P-bit floats (float32: 24): every value an "
                    "integer below 2^P, exact in any summation order; token ids only; "
                    "0 = unbounded")),
)
