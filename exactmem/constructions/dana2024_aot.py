"""``dana2024-aot``: a one-layer attention-only Transformer memorizing ``T = H d_h + d``
associations (Dana, Pydi & Chevaleyre, AISTATS 2025, Theorem 1 / Corollary 1).

Model (their eqs. 1-2): token embedding ``e`` (``d x V``), ``H`` softmax heads whose query is
the last token and whose keys are all positions, the skip connection kept, unembedding
``W_U`` (``V x d``) and argmax over the vocabulary:

    T(t) = W_U (x_S + sum_h W_O^h W_V^h sum_s a^h_s x_s),  a^h = softmax_s(x_s^T W_K^hT W_Q^h x_S)

Their proof: features ``[x_S ; W_V^h A_h(t)]`` (``d + H d_h`` rows) have rank ``T`` for generic
(irrational) embeddings, the skip connection acts as an extra "head 0" with a free ``d x d``
map, ``W_O`` solves a linear system onto targets ``lambda w_{y(t)}`` on a circle (Prop. 3), and
``lambda -> infinity`` limits make the argmax exact.  Here, exactly:

1. random dyadic embeddings and random rational ``W_Q, W_K, W_V`` (seeded);
2. rigorous softmax enclosures; midpoints stand in for the patterns; exact rank check of
   the ``T x (d + H d_h)`` feature matrix;
3. unembedding rows = distinct rational points on the unit circle (``((1-t^2)/(1+t^2),
   2t/(1+t^2))``) in the first two coordinates, so ``w_i . w_y < 1 = w_y . w_y``; targets
   ``z(t) = w_{y(t)}`` plus random free coordinates; solve ``[M_0 | O] G(t) = z(t)`` exactly
   (padded with random rows to a square system so that ``M_0`` is invertible);
4. the skip connection is the identity, so ``M_0`` moves into the readout: ``W_O^h =
   M_0^{-1} O_h`` and ``W_U' = W_U M_0``; weights are rounded to dyadics;
5. the argmax of every sequence is certified by the interval forward pass (finite weights,
   no limit); precision escalates until certified.

No positional embedding is used: for ``S = 2`` (the paper's bigram experiments) a sequence is
determined by its multiset and last token.  For longer sequences the dataset must be
consistent in that sense (checked; a violation names the two sequences).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix, softmax_enclosure, to_rational
from exactmem.constructions._linalg import inverse, matmul, rank, round_dyadic, solve_rows
from exactmem.constructions._lp_readout import LP_BITS, lp_readout
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import find_conflicting_duplicate, find_inconsistency
from exactmem.model.interval_verdict import IntervalOutcome, certify_interval, softmax_hint
from exactmem.model.spec import Affine as AffineMap
from exactmem.model.spec import Attention, Embedding, Head, Linear, NetworkSpec, Readout

PATTERN_PRECISIONS = (64, 128, 256)
MAX_SEEDS = 4
DENOM = 8


def capacity(heads: int, head_dim: int, d: int) -> int:
    """Theorem 1 / Corollary 1: ``H d_h + d`` associations."""
    return heads * head_dim + d


def check_assumptions(ds: Dataset) -> None:
    """Assumption 1 (association: one next token per context) and, without positional
    embeddings, consistency; raises :class:`AssumptionError` naming the sequences."""
    if ds.inputs != "token-ids" or ds.task != "next-token":
        raise AssumptionError(f"dana2024-aot reads token-id sequences with a next token each; "
                              f"found {ds.task} with {ds.inputs}")
    dup = find_conflicting_duplicate(ds)
    if dup is not None:
        i, j = dup
        raise AssumptionError(f"Assumption 1 (association: a deterministic next token) "
                              f"violated: sequences {i} and {j} are equal with next tokens "
                              f"{ds.labels[i]} and {ds.labels[j]}")
    bad = find_inconsistency(ds)
    if bad is not None:
        i, j, _ = bad
        raise AssumptionError(f"consistency without positional embeddings violated: sequences "
                              f"{i} and {j} have the same tokens and last token but next tokens "
                              f"{ds.labels[i]} and {ds.labels[j]}")


def circle_points(count: int) -> list[tuple[Fraction, Fraction]]:
    """``count`` distinct rational points on the unit circle (Pythagorean parametrisation)."""
    pts = []
    for c in range(count):
        t = Fraction(2 * c - count + 1, count // 2 + 1)
        pts.append(((1 - t * t) / (1 + t * t), 2 * t / (1 + t * t)))
    return pts


def _rand(rng: random.Random, rows: int, cols: int, scale: Fraction) -> list[list[Fraction]]:
    return [[Fraction(rng.randint(-16, 16), 8) * scale for _ in range(cols)] for _ in range(rows)]


def _features(seqs: list[tuple[int, ...]], emb: list[list[Fraction]], wq: list[Any],
              wk: list[Any], wv: list[Any], precision: int) -> list[list[Fraction]]:
    """Rows ``G(t) = [x_S ; W_V^h sum_s p~_s x_s]`` with rigorous-enclosure midpoints ``p~``.

    Per head, the token-pair scores ``(W_K E)^T (W_Q E)`` and the values ``W_V E`` are formed
    once with exact matrix products, so each sequence costs ``O(S d_h)`` rational operations.
    """
    d = len(emb)
    heads = []
    for q_m, k_m, v_m in zip(wq, wk, wv, strict=True):
        ke_t = [list(c) for c in zip(*matmul(k_m, emb), strict=True)]  # V x d_h
        kq = matmul(ke_t, matmul(q_m, emb))  # V x V: score of key token a for query token b
        heads.append((kq, list(zip(*matmul(v_m, emb), strict=True))))  # V rows of W_V e(t)
    rows = []
    for seq in seqs:
        row = [emb[r][seq[-1]] for r in range(d)]
        for kq, vals in heads:
            scores = [kq[t][seq[-1]] for t in seq]
            enc = softmax_enclosure(scores, precision=precision)
            p = [(lo + hi) / 2 for lo, hi in zip(enc.lower, enc.upper, strict=True)]
            row.extend(sum((pj * vals[t][c] for pj, t in zip(p, seq, strict=True)), Fraction(0))
                       for c in range(len(vals[0])))
        rows.append(row)
    return rows


_matmul = matmul


def _assemble(V: int, n: int, emb: list[list[Fraction]], wq: list[Any], wk: list[Any],
              wv: list[Any], w_u: list[list[Fraction]], m0: list[list[Fraction]],
              o: list[list[Fraction]], bits: int) -> NetworkSpec:
    """The network with readout ``W_U [M_0 | O]`` on the features: ``M_0`` (the skip
    connection's map) moves into the unembedding, ``W_O = M_0^{-1} O`` (rounded to
    ``2^-bits``); :class:`ConstructionError` when the rounded ``M_0`` is singular."""
    dh = len(wq[0])
    m0r = [[round_dyadic(v, bits) for v in row] for row in m0]
    m0inv = inverse(m0r)
    w_o = [[round_dyadic(v, bits) for v in row] for row in _matmul(m0inv, o)]
    heads = tuple(
        Head(query=ScaledMatrix.from_rows(wq[h]), key=ScaledMatrix.from_rows(wk[h]),
             value=ScaledMatrix.from_rows(wv[h]),
             output=ScaledMatrix.from_rows([row[h * dh:(h + 1) * dh] for row in w_o]))
        for h in range(len(wq)))
    return NetworkSpec(
        "token-ids", V, n,
        (Embedding(ScaledMatrix.from_rows(emb)),
         Attention(heads, kind="softmax", residual=True),
         Linear(AffineMap(ScaledMatrix.from_rows(_matmul(w_u, m0r))))),
        Readout("argmax", "last"))


def _class_vectors(rng: random.Random, count: int, d: int) -> list[list[Fraction]]:
    """Unembedding rows for the LP readout: distinct rational points of the unit sphere in
    ``R^d`` (inverse stereographic projection of random rational ``u``: ``(2u, |u|^2 - 1) /
    (|u|^2 + 1)``), so every class is an extreme point and can win the argmax, and all ``d``
    logit directions are used (the circle of the square-solve path uses two)."""
    out: list[list[Fraction]] = []
    while len(out) < count:
        u = [Fraction(rng.randint(-2 * DENOM, 2 * DENOM), DENOM) for _ in range(d - 1)]
        n2 = sum((x * x for x in u), Fraction(0))
        p = [2 * x / (n2 + 1) for x in u] + [(n2 - 1) / (n2 + 1)]
        if p not in out:
            out.append(p)
    return out


def _settings(ds: Dataset, options: Mapping[str, Any],
              ) -> tuple[int, int, int, int, Fraction, int]:
    """``(H, d_h, d, seed, scale, V)`` from the options, after the dataset's assumptions."""
    check_assumptions(ds)
    H, dh = int(options.get("heads", 2)), int(options.get("head_dim", 2))
    d = int(options.get("dim", 2))
    seed = int(options.get("seed", 0))
    scale = to_rational(options.get("scale", "1/2"), "scale")
    if d < 2 or H < 1 or not 1 <= dh <= d:
        raise ConstructionError(f"dana2024-aot needs d >= 2, H >= 1 and 1 <= d_h <= d; found "
                                f"d = {d}, H = {H}, d_h = {dh}")
    assert ds.vocab_size is not None
    return H, dh, d, seed, scale, ds.vocab_size


def lp_network(ds: Dataset, options: Mapping[str, Any],
               ) -> tuple[NetworkSpec, IntervalOutcome, dict[str, Any]]:
    """The network with the LP readout (:func:`~exactmem.constructions._lp_readout.
    lp_readout`) for *all* sequences of ``ds`` (``T`` may exceed ``H d_h + d``), evaluated
    with rigorous softmax bounds; the outcome says which sequences are certified (a subset
    when not all)."""
    H, dh, d, seed, scale, V = _settings(ds, options)
    rng = random.Random(seed * 1000)
    emb = [[Fraction(rng.randint(-DENOM, DENOM), DENOM) for _ in range(V)] for _ in range(d)]
    wq = [_rand(rng, dh, d, scale) for _ in range(H)]
    wk = [_rand(rng, dh, d, scale) for _ in range(H)]
    wv = [_rand(rng, dh, d, Fraction(1)) for _ in range(H)]
    w_u = _class_vectors(random.Random(seed * 1000 + 1), max(V, ds.num_classes), d)
    seqs = list(dict.fromkeys(ds.sequences))
    label = {s: y for s, y in zip(ds.sequences, ds.labels, strict=True)}
    g = _features(seqs, emb, wq, wk, wv, PATTERN_PRECISIONS[0])
    x, stats = lp_readout(g, [label[s] for s in seqs], w_u,
                          float(int(options.get("lp_subset", 4))))
    o = [row[d:] for row in x]
    for shift in range(-LP_BITS, 1):  # M_0 must be invertible: add 2^shift I if it is not
        m0 = [[v + (Fraction(2) ** shift if i == j and shift > -LP_BITS else 0)
               for j, v in enumerate(row[:d])] for i, row in enumerate(x)]
        try:
            spec = _assemble(V, ds.n, emb, wq, wk, wv, w_u, m0, o, LP_BITS)
            break
        except ConstructionError:
            continue
    else:
        raise ConstructionError("the LP readout's skip-connection map M_0 stayed singular")
    outcome = certify_interval(spec, ds, None, (PATTERN_PRECISIONS[0],))
    params = {"heads": H, "head_dim": dh, "dim": d, "seed": seed, "readout": "lp",
              "scale": f"{scale.numerator}/{scale.denominator}", "T": len(seqs),
              "theorem_capacity": capacity(H, dh, d), "weight_bits": LP_BITS,
              **stats}
    return spec, outcome, params


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """Check the assumptions, build embedding, heads and readout, certify (module docstring).
    ``readout = "lp"``: the readout of :func:`lp_readout` (every sequence must certify)."""
    if options.get("readout", "solve") == "lp":
        spec, outcome, params = lp_network(ds, options)
        if not outcome.verified:
            certified = sum(1 for row in outcome.evaluation.predictions if row[0] is not None)
            raise ConstructionError(f"dana2024-aot with the LP readout certified {certified} of "
                                    f"{ds.N} sequences ({outcome.status}); use "
                                    "lp_network for the certified subset")
        note = f"LP readout: all {ds.N} sequences certified at {outcome.precision} bits"
        return BuildResult(spec=spec, params=params, notes=(note,),
                           hints={"softmax": softmax_hint(outcome)})
    if options.get("readout", "solve") != "solve":
        raise ConstructionError(f"readout: 'solve' or 'lp', found {options.get('readout')!r}")
    H, dh, d, seed, scale, V = _settings(ds, options)
    C = max(V, ds.num_classes)
    seqs = list(dict.fromkeys(ds.sequences))
    label = {s: y for s, y in zip(ds.sequences, ds.labels, strict=True)}
    T, D = len(seqs), capacity(H, dh, d)
    if T > D:
        raise ConstructionError(f"T = {T} distinct sequences exceed H d_h + d = {D}: the "
                                f"feature matrix cannot have rank T")
    constant = [i for i, s in enumerate(ds.sequences) if len(set(s)) == 1]
    if len({ds.sequences[i] for i in constant}) > d:
        raise ConstructionError(f"{len(constant)} sequences repeat a single token (e.g. "
                                f"sequences {constant[:d + 1]}); without positional embeddings "
                                f"their attention features are linear in the token's embedding, "
                                f"so at most d = {d} of them can be fitted")
    circle = circle_points(C)
    w_u = [[x, y] + [Fraction(0)] * (d - 2) for x, y in circle]
    last = ""
    for attempt in range(MAX_SEEDS):
        rng = random.Random(seed * 1000 + attempt)
        emb = [[Fraction(rng.randint(-DENOM, DENOM), DENOM) for _ in range(V)] for _ in range(d)]
        wq = [_rand(rng, dh, d, scale) for _ in range(H)]
        wk = [_rand(rng, dh, d, scale) for _ in range(H)]
        wv = [_rand(rng, dh, d, Fraction(1)) for _ in range(H)]
        targets = [[*circle[label[s]], *(Fraction(rng.randint(-DENOM, DENOM), DENOM)
                                         for _ in range(d - 2))] for s in seqs]
        for prec in PATTERN_PRECISIONS:
            g = _features(seqs, emb, wq, wk, wv, prec)
            r = rank(g)
            if r < T:
                last = f"attempt {attempt}: feature rank {r} < T = {T}"
                break
            pad_g = g + [[Fraction(rng.randint(-DENOM, DENOM), DENOM) for _ in range(D)]
                         for _ in range(D - T)]
            pad_z = targets + [[Fraction(rng.randint(-DENOM, DENOM), DENOM) for _ in range(d)]
                               for _ in range(D - T)]
            if rank(pad_g) < D:
                last = f"attempt {attempt}: padding left the system singular"
                break
            x = solve_rows(pad_g, pad_z)  # D x d, [M0 | O] = x^T
            m0 = [[x[j][i] for j in range(d)] for i in range(d)]
            o = [[x[d + j][i] for j in range(H * dh)] for i in range(d)]
            if rank(m0) < d:
                last = f"attempt {attempt}: M0 singular"
                break
            bits = prec // 2
            try:
                spec = _assemble(V, ds.n, emb, wq, wk, wv, w_u, m0, o, bits)
            except ConstructionError:
                last = f"attempt {attempt}: rounded M0 singular"
                break
            outcome = certify_interval(spec, ds, None, (prec, 2 * prec))
            if outcome.verified:
                params = {"heads": H, "head_dim": dh, "dim": d, "seed": seed,
                          "attempt": attempt, "scale": f"{scale.numerator}/{scale.denominator}",
                          "T": T, "theorem_capacity": D, "feature_rank": r,
                          "weight_bits": bits}
                note = (f"certified the argmax of all {ds.N} sequences (T = {T} distinct; "
                        f"H d_h + d = {D}) with softmax bounds at {outcome.precision} bits, "
                        f"Taylor order <= {outcome.order}")
                return BuildResult(spec=spec, params=params, notes=(note,),
                                   hints={"softmax": softmax_hint(outcome)})
            last = f"attempt {attempt}: {outcome.status} at {outcome.precision} bits"
    raise ConstructionError(f"dana2024-aot could not certify T = {T} associations with H = {H}, "
                            f"d_h = {dh}, d = {d} (H d_h + d = {D}); last: {last}")


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Theorem 1: ``T = H d_h + d`` associations with ``d (S + 2 N + 4 d_h H)`` parameters."""
    if "heads" not in kw:  # the caller did not pass the construction's parameters
        return {"capacity": "H d_h + d", "params": "d (S + 2 N + 4 d_h H)"}
    H, dh, dim = int(kw["heads"]), int(kw.get("head_dim", 2)), int(kw.get("dim", 2))
    return {"capacity": capacity(H, dh, dim),
            "params": dim * (n + 2 * max(C, 1) + 4 * dh * H)}


CONSTRUCTION = Construction(
    name="dana2024-aot",
    summary="one-layer attention-only Transformer (softmax, query = last token, skip), "
            "H d_h + d associations, argmax certified",
    reference="Dana, Pydi & Chevaleyre, AISTATS 2025, Theorem 1 and Corollary 1",
    tasks=("next-token",),
    inputs=("token-ids",),
    build=build,
    options=(
        Option("heads", int, 2, "number of heads H"),
        Option("head_dim", int, 2, "head dimension d_h (<= dim)"),
        Option("dim", int, 2, "embedding dimension d (>= 2)"),
        Option("seed", int, 0, "random seed for embeddings and weights"),
        Option("scale", str, "1/2",
               "query/key weights are random multiples of 1/8 in [-2, 2], times scale"),
        Option("readout", str, "solve",
               "'solve': the square system of the proof (T <= H d_h + d); 'lp': a linear "
               "program picks the readout (needs scipy)"),
        Option("lp_subset", int, 4,
               "LP readout: candidate associations, in multiples of H d_h + d"),
    ),
    bound=bound,
)
