"""``kajitsuka2025-next-token``: Theorem 4.1 / B.1 (and E.1) of Kajitsuka & Sato, ICLR 2025.

*On the Optimal Memorization Capacity of Transformers*: a Transformer
``E_out o FF_2 o UA o FF_1 o E_in`` of constant width whose parameter count grows like
``sqrt(N)`` (up to logs) memorizes N sequences (next-token prediction).

Assumptions (checked exactly; the build refuses otherwise): labels consistent (eq. 5: equal
multisets with the same last token share the label), labels integers >= 0 (shifted to
``[C] = {1..C}`` inside, shifted back by ``E_out``); vector tokens distinct tokens at a
positive distance (Assumption 4.1 with ``r = max(1, max |x|)``, ``delta = min(1, least gap)``).

Pipeline (the role of each layer):

1. ``E_in``: token ids are embedded (Thm E.1) as ``(f(t), t + 1, 0)`` for ``t`` in the
   distinguishing vocabulary ``A`` and ``(0, t + 1, 0)`` otherwise; vector tokens are projected
   to a scalar ``p(x)`` >= 2 with distinct tokens >= 2 apart (Lemma C.2, exact recipe) and
   ``FF_1`` = Lemma C.1 maps ``p(x) -> (phi(x), p(x), 0)`` with ``phi = f`` on ``A`` and 0 on
   every other token (Lemma B.3);
2. ``A`` is Lemma B.1's greedy distinguishing vocabulary (restricted multisets stay distinct);
   ``f : A -> {1..K}`` are random integers, resampled until the sums ``S_i = sum m_i(x) f(x)``
   are pairwise distinct over the distinct multisets (exact; replaces Lemma B.2, whose
   constant shift does not preserve the separation, see the docs);
3. ``UA``: one uniform-attention head (zero query/key, value ``e_1``, output ``e_3``) adds
   ``S_i / n`` to the third coordinate: the context id ``s = (phi(x_k), F(x_k), S_i / n)``
   (eqs. 52-53), injective in (multiset, token at the read position);
4. ``FF_2`` = Lemma C.1 on the distinct context ids (its own Stage-I projection from Q^3);
5. ``E_out`` subtracts the label shift.

Size (Theorem B.1, without hidden constants): width 14, depth
``~ sqrt(N log N) + sqrt(N / log N) max(log R, log C)``, bits
``~ log d + sqrt(N / log N) max(log R, log C)`` with ``R = 400 sqrt(3) d n^3 r N^5 / delta pi``;
parameters: a width-14 network of that depth, ``E_in + depth 14 (14 + 1) + 5 * 14``.
:func:`theorem_bound` evaluates these with hidden constant factors 1 and the recorded
``r / delta``; measured at N = 64 ... 1024 (n = 16, ids): depth 0.39-0.41, max bits
0.29-0.32 and nonzero parameters 0.031-0.033 of them;
``tests/constructions/test_size_guards.py`` holds every size claim (slope of nonzero
parameters over N <= 0.65) to the built networks.
See :mod:`exactmem.constructions.bounds` and ``exactmem info`` for the lower bounds.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from itertools import repeat
from operator import mul
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.constructions._gadget_chain import emit_chain
from exactmem.constructions._gadgets import Program
from exactmem.constructions._multiset_counts import MultisetCounts, fits
from exactmem.constructions._projection import stage_one_projection
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import (
    distinct_tokens,
    multiset_keys,
    require_consistent,
    separation_squared,
)
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

MAX_TRIES = 64

OPTIONS = (
    Option("seed", int, 0, "random seed for token weights and projections"),
    Option("block_size", int, 0,
           "points per block k in Lemma C.1 (0: the paper's ceil(N / sqrt(N log N)))"),
    Option("block_points", int, 0,
           "Thm F.1 bounded bits: Lemma C.1 sub-networks of B^2 points each (0: one network)"),
    Option("max_bits", int, 0,
           "float-ready network for P-bit floats (float32: 24): every value an integer below "
           "2^P, exact in any summation order; token ids only; 0 = the unbounded construction"),
    Option("block_words", int, 0,
           "with --max-bits: table words per block of the memorizer (0: ~sqrt(7M/12f))"),
)


def distinguishing_vocabulary(multisets: list[Counter[Any]]) -> list[Any]:
    """Lemma B.1 (greedy): a token set ``A`` on which the distinct multisets stay distinct.

    Each multiset seen so far keeps its key (its counts of the chosen tokens, in order); a
    newly chosen token extends every key by one count instead of recomputing them all."""
    chosen: list[Any] = []
    keys: list[tuple[int, ...]] = []
    seen: dict[tuple[int, ...], int] = {}
    for i, ms in enumerate(multisets):
        # dict.get, not Counter's [] (which calls __missing__ in Python for a missing token)
        key = tuple(map(ms.get, chosen, repeat(0)))
        j = seen.get(key)
        if j is not None:
            other = multisets[j]
            t = next(t for t in sorted({*ms, *other}, key=repr) if ms[t] != other[t])
            chosen.append(t)
            keys = [k + (m.get(t, 0),) for k, m in zip(keys, multisets, strict=False)]
            seen = {k: h for h, k in enumerate(keys)}
            key += (ms.get(t, 0),)
        keys.append(key)
        seen[key] = i
    if not chosen:
        chosen.append(next(iter(multisets[0])))
    return chosen


def token_weights(multisets: list[Counter[Any]], vocab: list[Any],
                  rng: random.Random) -> tuple[dict[Any, int], int, list[int]]:
    """Random ``f : A -> {1..K}`` with pairwise distinct sums over the multisets (exact);
    returns ``f``, ``K`` and the sums, one per multiset."""
    K = max(16, len(multisets) ** 2)
    for _ in range(MAX_TRIES):
        f = {t: rng.randint(1, K) for t in vocab}
        weight = f.get  # a token outside ``vocab`` weighs 0
        sums = [sum(map(mul, ms.values(), map(weight, ms, repeat(0)))) for ms in multisets]
        if len(set(sums)) == len(multisets):
            return f, K, sums
    raise ConstructionError(f"no injective token weights in {MAX_TRIES} draws from 1..{K}")


def _vocabulary_and_weights(keys: list[tuple[Any, ...]], tokens: list[Any], n: int,
                            rng: random.Random,
                            ) -> tuple[list[Any], dict[Any, int], int, list[int]]:
    """Lemma B.1's vocabulary and the token weights on numpy counts
    (:mod:`~exactmem.constructions._multiset_counts`), or by the reference forms above where
    a greedy key or a weighted sum could pass int64 (the same tokens, draws and sums either
    way)."""
    if not fits(len(keys), n):
        multisets = [Counter(k) for k in keys]
        vocab_a = distinguishing_vocabulary(multisets)
        return (vocab_a, *token_weights(multisets, vocab_a, rng))
    counts = MultisetCounts(keys, tokens, n)
    vocab_a = counts.distinguishing_vocabulary()
    weights = counts.token_weights(vocab_a, rng, MAX_TRIES)
    if weights is None:
        weights = token_weights([Counter(k) for k in keys], vocab_a, rng)
    return (vocab_a, *weights)


def _check(ds: Dataset) -> dict[str, Any]:
    require_consistent(ds)
    facts: dict[str, Any] = {}
    if ds.inputs == "vectors":
        sep = separation_squared(ds)
        assert sep is not None
        d2, r2 = sep
        if len(distinct_tokens(ds)) > 1 and d2 <= 0:
            raise AssumptionError("Assumption 4.1: two distinct tokens at distance 0")
        facts["delta_squared"] = str(min(d2, Fraction(1)) if d2 > 0 else Fraction(1))
        facts["r_squared"] = str(max(r2, Fraction(1)))
    return facts


def build_pipeline(ds: Dataset, options: Mapping[str, Any], every: bool) -> BuildResult:
    """Build ``E_out o FF_2 o UA o FF_1 o E_in`` reading the last position or every position."""
    facts = _check(ds)
    seed = int(options.get("seed", 0))
    block_size = int(options.get("block_size", 0))
    group = int(options.get("block_points", 0)) ** 2
    if block_size < 0 or group < 0:
        raise ConstructionError("block_size and block_points must be >= 0")
    rng = random.Random(seed)
    n = ds.n
    ms_index: dict[tuple[Any, ...], int] = {}
    seq_ms = [ms_index.setdefault(key, len(ms_index)) for key in multiset_keys(ds)]
    tokens = distinct_tokens(ds)
    vocab_a, f, K, sums = _vocabulary_and_weights(list(ms_index), tokens, n, rng)
    layers: list[Layer] = []
    notes: list[str] = []
    if ds.inputs == "token-ids":
        assert ds.vocab_size is not None
        table = [[0] * ds.vocab_size for _ in range(3)]
        for t in range(ds.vocab_size):
            table[0][t], table[1][t] = f.get(t, 0), t + 1
        layers.append(Embedding(ScaledMatrix.from_rows(table)))
        coord = {t: Fraction(t + 1) for t in tokens}
        input_dim = ds.vocab_size
        ff1: dict[str, Any] = {"embedding": "Thm E.1"}
    else:
        assert ds.dim is not None
        proj = stage_one_projection(tokens, rng)
        coord = dict(zip(tokens, proj.values, strict=True))
        layers.append(Linear(proj.affine()))
        prog1 = Program(["x"])
        in_a = [t for t in tokens if t in f]
        zeros = [coord[t] for t in tokens if t not in f]
        lay1, out1 = emit_chain(prog1, [coord[t] for t in in_a], [f[t] for t in in_a], zeros,
                                block_size, group)
        prog1.step({"phi": out1, "F": {"x": 1}, "z": {}})
        layers.append(prog1.feedforward())
        input_dim = ds.dim
        ff1 = {"lemma_c1": lay1, "projection_top": str(proj.top)}
    zero = ScaledMatrix.zeros(1, 3)
    layers.append(Attention((Head(query=zero, key=zero, value=ScaledMatrix.row([1, 0, 0]),
                                  output=ScaledMatrix.column([0, 0, 1])),),
                            kind="uniform", residual=True))
    # a context (f(t), coord(t), mean f) is one (token, multiset) pair: coord is one-to-one
    # on tokens and the sums on multisets (token_weights), so pairs of small integers key it
    slot = {t: h for h, t in enumerate(tokens)}
    contexts: dict[tuple[int, int], tuple[int, int]] = {}
    for i, seq in enumerate(ds.sequences):
        positions = range(n) if every else (n - 1,)
        for k, y in zip(positions, ds.position_labels(i), strict=True):
            prev = contexts.setdefault((slot[seq[k]], seq_ms[i]), (y, i))
            if prev[0] != y:
                raise ConstructionError(f"context of sequence {i} position {k} equals that of "
                                        f"sequence {prev[1]} but the labels differ")
    f_of = [Fraction(f.get(t, 0)) for t in tokens]
    coords = [coord[t] for t in tokens]
    means = [Fraction(v, n) for v in sums]
    points = [(f_of[h], coords[h], means[m]) for h, m in contexts]
    proj2 = stage_one_projection(points, rng)
    prog2 = Program(["phi", "F", "mean"])
    w2 = proj2.weight
    prog2.step({"x": {"phi": w2[0], "F": w2[1], "mean": w2[2], "1": proj2.bias}})
    lay2, out2 = emit_chain(prog2, proj2.grid, [y + 1 for y, _ in contexts.values()],
                            (), block_size, group)
    prog2.step({"y": out2})
    layers.append(prog2.feedforward())
    layers.append(Linear(Affine(ScaledMatrix.row([1]), ScaledMatrix.column([-1]))))
    spec = NetworkSpec(input_kind=ds.inputs, input_dim=input_dim, seq_len=n,
                       layers=tuple(layers),
                       readout=Readout("scalar", "every" if every else "last"))
    params = {"seed": seed, "block_size": block_size, "block_points": int(options.get(
        "block_points", 0)), "distinct_multisets": len(ms_index), "vocabulary_A": len(vocab_a),
        "token_weight_range": K, "contexts": len(points), "ff1": ff1,
        "ff2": {"lemma_c1": lay2, "projection_top": str(proj2.top)}, **facts}
    return BuildResult(spec=spec, params=params, notes=tuple(notes))


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    if ds.task != "next-token":
        raise ConstructionError("kajitsuka2025-next-token reads one label per sequence; "
                                "use kajitsuka2025-seq2seq for seq2seq datasets")
    if int(options.get("max_bits", 0) or 0):
        from exactmem.constructions.kajitsuka2025_float import build_float_ready

        return build_float_ready(ds, options, every=False)
    return build_pipeline(ds, options, every=False)


WIDTH = 14  # Theorem B.1 / E.1


def r_over_delta_of(params: Mapping[str, Any]) -> float:
    """``r / delta`` from a build's recorded ``r_squared`` and ``delta_squared`` (1 if absent).

    The vector pipeline records both (Assumption 4.1, exact); token ids record neither, and
    Theorem E.1's ``R`` already carries the vocabulary, so ids use ``r / delta = 1``.
    """
    r2, d2 = params.get("r_squared"), params.get("delta_squared")
    if r2 is None or d2 is None:
        return 1.0
    return math.sqrt(Fraction(r2) / Fraction(d2))


def theorem_bound(points: int, n: int, d: int, C: int, token_ids: bool = False,  # noqa: N803
                  r_over_delta: float = 1.0) -> dict[str, Any]:
    """Theorem B.1 (vectors) / E.1 (token ids) size formulas for this N, n, d, C, r / delta.

    Constants as printed, the hidden constant factors of ``<~`` taken as 1, logs base 2;
    ``points`` is N (next-token) or nN (seq2seq, Cor. 4.1); ``d`` is the vocabulary size
    ``omega`` for token ids.  With ``L = log2 N`` and ``T = sqrt(N / L) max(log2 R, log2 C)``:

    * ``depth = sqrt(N L) + T`` and ``bits = log2 d + T``;
    * ``R = 400 sqrt(3) d n^3 (r / delta) N^5 pi`` (B.1), ``200 sqrt(3) n^2 (r / delta) N^5
      omega pi`` (E.1);
    * ``params`` counts what a network of width ``W = 14`` and this depth can hold:
      ``E_in + depth W (W + 1) + 4W + W`` -- every affine map ``W x W`` plus its bias, one
      attention head of size 1 (query, key, value, output: ``4W``) and ``E_out`` (``W``);
      ``E_in`` is ``3 omega`` (E.1's embedding ``W^(EM)``) or ``W d`` (B.1's ``R^d -> R^W``).
      The paper's ``O~(d + sqrt N)`` leaves this ``W (W + 1) = 210`` per layer in its constant.
    """
    N = max(points, 2)  # noqa: N806
    if token_ids:
        R = 200 * math.sqrt(3) * n ** 2 * r_over_delta * N ** 5 * d * math.pi  # noqa: N806
    else:
        R = 400 * math.sqrt(3) * d * n ** 3 * r_over_delta * N ** 5 * math.pi  # noqa: N806
    lg = math.log2(N)
    term = math.sqrt(N / lg) * max(math.log2(R), math.log2(max(C, 2)))
    depth = math.ceil(math.sqrt(N * lg) + term)
    embed = 3 * d if token_ids else WIDTH * d
    params = embed + depth * WIDTH * (WIDTH + 1) + 4 * WIDTH + WIDTH
    return {"theorem": "E.1" if token_ids else "B.1", "R": f"{R:.4g}",
            "r_over_delta": round(r_over_delta, 6), "width": WIDTH, "depth": depth,
            "bits": math.ceil(math.log2(max(d, 2)) + term), "params": params,
            "note": f"constants as printed, hidden constant factors 1, logs base 2, r/delta = "
                    f"{r_over_delta:.6g}{' (token ids)' if token_ids else ''}; params = "
                    f"E_in ({embed}) + depth x W(W+1) + 5W with W = {WIDTH}: the dense count "
                    f"of a width-{WIDTH} network of that depth"}


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Theorem B.1 / E.1 for a certificate: ``kw`` are its construction params and inputs."""
    ids = kw.get("inputs") == "token-ids"
    return theorem_bound(N, n, d, C, token_ids=ids, r_over_delta=r_over_delta_of(kw))


CONSTRUCTION = Construction(
    name="kajitsuka2025-next-token",
    summary="O~(sqrt N) next-token Transformer: E_out o FF2 o UA o FF1 o E_in, width 14",
    reference="Kajitsuka & Sato, ICLR 2025, Theorem 4.1 / B.1 (ids: Theorem E.1)",
    tasks=("next-token",),
    inputs=("token-ids", "vectors"),
    build=build,
    options=OPTIONS,
    bound=bound,
)
