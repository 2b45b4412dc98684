"""``mahdavi2024-mha``: one multi-head softmax attention layer memorizing
``H (min(n, d_h) - 1) + 1`` examples (Mahdavi, Liao & Thrampoulidis, ICLR 2024, Theorem 1).

Model (their code ``src/attn_models.py``): an example is ``X = [e; E]``, a query token ``e``
at position 0 and ``n`` context tokens ``E`` (rows) at positions ``1..n``; the query attends
to the context only, there is no residual, and a linear readout gives a scalar:

    f(X) = sum_h  u_h^T  E^T softmax(E W_K^h^T W_Q^h e)

(``W_Q^h, W_K^h`` are ``d_h x d``; ``u_h`` is the value/output pair of head ``h`` followed by
the readout).  Assumptions checked exactly: ``n < d``; Assumption 2 - every context has rank
``n`` over Q; Assumption 1 - the queries have Kruskal rank ``>= n`` (exhaustive over all
``n``-subsets up to a limit, otherwise random subsets, labelled "sampled").

Construction (their proof strategy: attention maps give a high-rank representation, the
readout solves a linear system):

1. random rational ``W_Q^h, W_K^h`` (seeded);
2. rigorous enclosures of every attention row (:mod:`exactmem.arith.softmax`), midpoints
   ``p~`` as rational stand-ins for the irrational patterns;
3. features ``phi_t = (E_t^T p~_{t,1}, ..., E_t^T p~_{t,H})`` in ``Q^{H d}``; exact rank
   check ``rank(Phi) = T`` and the exact minimum-norm solution of ``Phi u = y``; ``u`` is
   rounded to dyadics;
4. the built network is evaluated with the interval forward pass and each output certified
   within ``epsilon`` of its label (default ``1/4``: integer labels are recovered by
   rounding).  Precision escalates until certified.

Because ``exp`` is irrational the outputs equal the labels only up to ``epsilon``; the rank
condition is checked on the rational stand-ins and the certificate, not the rank check, is
the guarantee.  Capacity reached and gaps: ``docs/constructions/mahdavi2024.md``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix, format_rational, softmax_enclosure, to_rational
from exactmem.constructions._linalg import (
    inverse,
    kruskal_at_least,
    rank,
    round_dyadic,
    solve_min_norm,
)
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.interval_verdict import certify_interval, softmax_hint
from exactmem.model.spec import Affine, Attention, Head, Linear, NetworkSpec, Readout

PATTERN_PRECISIONS = (64, 128, 256, 512)
MAX_SEEDS = 4


def capacity(heads: int, head_dim: int, n: int) -> int:
    """Theorem 1's count ``H (min(n, d_h) - 1) + 1``."""
    return heads * (min(n, head_dim) - 1) + 1


def check_assumptions(ds: Dataset, options: Mapping[str, Any]) -> dict[str, Any]:
    """Exact checks of ``n < d``, Assumption 2 (rank-n contexts) and Assumption 1 (Kruskal
    rank of the queries >= n); raises :class:`AssumptionError` naming the witnesses."""
    if ds.inputs != "vectors" or ds.task != "next-token":
        raise AssumptionError("mahdavi2024-mha reads vector sequences [query, context...] with "
                              f"one label each; found {ds.task} with {ds.inputs}")
    assert ds.dim is not None
    n, d = ds.n - 1, ds.dim
    if n < 1:
        raise AssumptionError("a sequence needs a query token and at least one context token")
    if not n < d:
        raise AssumptionError(f"assumption n < d violated: context size n = {n}, token "
                              f"dimension d = {d}")
    for t, seq in enumerate(ds.sequences):
        r = rank(list(seq[1:]))
        if r < n:
            raise AssumptionError(f"Assumption 2 (rank-n contexts) violated: the context of "
                                  f"sequence {t} has rank {r} < n = {n}")
    queries = [seq[0] for seq in ds.sequences]
    rep = kruskal_at_least(queries, n, int(options.get("kruskal_limit", 20000)),
                           int(options.get("kruskal_samples", 2000)),
                           int(options.get("seed", 0)))
    if rep.witness is not None:
        raise AssumptionError(f"Assumption 1 (Kruskal rank of the queries >= n = {n}) "
                              f"violated: the queries of sequences {list(rep.witness)} are "
                              f"linearly dependent ({rep.label()})")
    return {"n": n, "d": d, "kruskal_check": rep.label()}


def _random_matrix(rng: random.Random, rows: int, cols: int,
                   scale: Fraction) -> list[list[Fraction]]:
    return [[Fraction(rng.randint(-16, 16), 8) * scale for _ in range(cols)] for _ in range(rows)]


def _dot(a: Any, b: Any) -> Fraction:
    return sum((x * y for x, y in zip(a, b, strict=True)), Fraction(0))


def _features(ds: Dataset, wq: list[list[list[Fraction]]], wk: list[list[list[Fraction]]],
              precision: int) -> list[list[Fraction]]:
    """Rows ``phi_t`` from midpoints of rigorous softmax enclosures."""
    rows: list[list[Fraction]] = []
    for seq in ds.sequences:
        e, ctx = seq[0], seq[1:]
        row: list[Fraction] = []
        for q_mat, k_mat in zip(wq, wk, strict=True):
            q = [_dot(r, e) for r in q_mat]
            scores = [_dot([_dot(r, x) for r in k_mat], q) for x in ctx]
            enc = softmax_enclosure(scores, precision=precision)
            p = [(lo + hi) / 2 for lo, hi in zip(enc.lower, enc.upper, strict=True)]
            row.extend(sum((pj * x[c] for pj, x in zip(p, ctx, strict=True)), Fraction(0))
                       for c in range(len(e)))
        rows.append(row)
    return rows


def _spec(ds: Dataset, wq: list[list[list[Fraction]]], wk: list[list[list[Fraction]]],
          u: list[Fraction], head_dim: int) -> NetworkSpec:
    assert ds.dim is not None
    d, n = ds.dim, ds.n - 1
    heads = []
    for h, (q_mat, k_mat) in enumerate(zip(wq, wk, strict=True)):
        value = [u[h * d:(h + 1) * d]] + [[Fraction(0)] * d for _ in range(head_dim - 1)]
        output = [[Fraction(1 if (i == 0 and j == 0) else 0) for j in range(head_dim)]
                  for i in range(d)]
        heads.append(Head(query=ScaledMatrix.from_rows(q_mat), key=ScaledMatrix.from_rows(k_mat),
                          value=ScaledMatrix.from_rows(value),
                          output=ScaledMatrix.from_rows(output)))
    readout = Linear(Affine(ScaledMatrix.row([1] + [0] * (d - 1))))
    att = Attention(tuple(heads), kind="softmax", residual=False, keys=tuple(range(1, n + 1)))
    return NetworkSpec("vectors", d, n + 1, (att, readout), Readout("scalar", "first"))


def _exact_spec(ds: Dataset, wq: list[list[list[Fraction]]], wk: list[list[list[Fraction]]],
                u: list[Fraction]) -> NetworkSpec:
    """The paper's model with its features exposed: a lift ``x -> (x, ..., x)`` (H copies),
    one softmax layer whose head ``h`` reads and writes block ``h`` (value and output the
    identity on it), so the query position holds ``phi = (E^T p_1, ..., E^T p_H)``, then a
    linear readout ``u``."""
    assert ds.dim is not None
    d, n, H = ds.dim, ds.n - 1, len(wq)  # noqa: N806

    def block(rows: list[list[Fraction]], h: int) -> list[list[Fraction]]:
        return [[Fraction(0)] * (h * d) + list(r) + [Fraction(0)] * ((H - h - 1) * d)
                for r in rows]

    eye = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
    lift = Linear(Affine(ScaledMatrix.from_rows([r for _ in range(H) for r in eye])))
    heads = tuple(Head(query=ScaledMatrix.from_rows(block(wq[h], h)),
                       key=ScaledMatrix.from_rows(block(wk[h], h)),
                       value=ScaledMatrix.from_rows(block(eye, h)),
                       output=ScaledMatrix.from_rows(
                           [list(r) for r in zip(*block(eye, h), strict=True)]))
                  for h in range(H))
    att = Attention(heads, kind="softmax", residual=False, keys=tuple(range(1, n + 1)))
    readout = Linear(Affine(ScaledMatrix.row(u)))
    return NetworkSpec("vectors", d, n + 1, (lift, att, readout), Readout("scalar", "first"))


def _independent_columns(phi: list[list[Fraction]]) -> list[int]:
    """The first columns of ``phi`` (greedily) that span its column space."""
    cols: list[int] = []
    for j in range(len(phi[0])):
        if rank([[row[c] for c in [*cols, j]] for row in phi]) > len(cols):
            cols.append(j)
        if len(cols) == len(phi):
            break
    return cols


def _build_exact(ds: Dataset, options: Mapping[str, Any], info: dict[str, Any]) -> BuildResult:
    """The exact-readout variant: features ``phi_t`` of rank T, and a hint (columns and a
    dyadic preconditioner ``C ~ A^-1``) from which the checker proves that the T x T feature
    matrix is non-singular for every softmax value within its rigorous bounds."""
    H, dh = int(options.get("heads", 2)), int(options.get("head_dim", 2))  # noqa: N806
    scale = to_rational(options.get("scale", "1/2"), "scale")
    seed, T, prec = int(options.get("seed", 0)), ds.N, 128  # noqa: N806
    last = ""
    for attempt in range(MAX_SEEDS):
        rng = random.Random(seed * 1000 + attempt)
        wq = [_random_matrix(rng, dh, ds.dim or 0, scale) for _ in range(H)]
        wk = [_random_matrix(rng, dh, ds.dim or 0, scale) for _ in range(H)]
        phi = _features(ds, wq, wk, prec)
        cols = _independent_columns(phi)
        if len(cols) < T:
            last = f"seed attempt {attempt}: the features have rank {len(cols)} < T = {T}"
            continue
        a = [[row[c] for c in cols] for row in phi]
        pre = [[round_dyadic(x, prec) for x in r] for r in inverse(a)]
        sol = solve_min_norm(a, [[Fraction(y)] for y in ds.labels])
        u = [Fraction(0)] * len(phi[0])
        for c, r in zip(cols, sol, strict=True):
            u[c] = round_dyadic(r[0], prec)
        hint = {"precision": prec, "readout": {
            "columns": cols, "preconditioner": [[format_rational(x) for x in r] for r in pre]}}
        params = {"heads": H, "head_dim": dh, "seed": seed, "attempt": attempt,
                  "scale": format_rational(scale), "T": T, "n": info["n"], "d": info["d"],
                  "readout": "exact", "feature_rank": len(cols),
                  "theorem_capacity": capacity(H, dh, info["n"]),
                  "kruskal_check": info["kruskal_check"]}
        notes = (f"features of rank {T} on columns {cols}: the checker proves that an exact "
                 f"real readout exists (theorem count H(min(n,d_h)-1)+1 = "
                 f"{capacity(H, dh, info['n'])})",)
        return BuildResult(spec=_exact_spec(ds, wq, wk, u), params=params, notes=notes,
                           hints={"softmax": hint})
    raise ConstructionError(f"mahdavi2024-mha (exact readout) found no features of rank "
                            f"T = {T} with H = {H}, d_h = {dh}; last: {last}")


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """Check the assumptions, build the heads and the readout, certify (module docstring)."""
    info = check_assumptions(ds, options)
    if options.get("readout", "epsilon") == "exact":
        if ds.N > int(options.get("heads", 2)) * info["d"]:
            raise ConstructionError(f"T = {ds.N} examples exceed H d = "
                                    f"{int(options.get('heads', 2)) * info['d']}, the number "
                                    "of features; no readout can fit them")
        return _build_exact(ds, options, info)
    if options.get("readout", "epsilon") != "epsilon":
        raise ConstructionError(f"--readout: 'epsilon' or 'exact', found {options['readout']!r}")
    H, dh = int(options.get("heads", 2)), int(options.get("head_dim", 2))
    if H < 1 or dh < 1:
        raise ConstructionError(f"heads and head_dim must be >= 1, found {H}, {dh}")
    eps = to_rational(options.get("epsilon", "1/4"), "epsilon")
    scale = to_rational(options.get("scale", "1/2"), "scale")
    seed = int(options.get("seed", 0))
    d, n, T = info["d"], info["n"], ds.N
    formula = capacity(H, dh, n)
    notes: list[str] = []
    if T > H * d:
        raise ConstructionError(f"T = {T} examples exceed H d = {H * d}, the dimension of "
                                f"the readout's features; no linear readout can fit them")
    y = [[Fraction(lab)] for lab in ds.labels]
    last_error = ""
    for attempt in range(MAX_SEEDS):
        rng = random.Random(seed * 1000 + attempt)
        wq = [_random_matrix(rng, dh, d, scale) for _ in range(H)]
        wk = [_random_matrix(rng, dh, d, scale) for _ in range(H)]
        for prec in PATTERN_PRECISIONS:
            phi = _features(ds, wq, wk, prec)
            try:
                sol = solve_min_norm(phi, y)
            except ConstructionError as exc:
                last_error = f"seed attempt {attempt}: {exc}"
                break
            u_exact = [r[0] for r in sol]
            norm = max(sum(abs(x) for x in row) for row in phi)
            bits = max(8, (norm * 8 / eps).numerator.bit_length()
                       - (norm * 8 / eps).denominator.bit_length() + 2)
            u = [round_dyadic(x, bits) for x in u_exact]
            spec = _spec(ds, wq, wk, u, dh)
            outcome = certify_interval(spec, ds, eps, (prec, 2 * prec))
            if outcome.verified:
                notes.append(f"certified all {T} outputs within {eps} of their labels "
                             f"(softmax bounds at {outcome.precision} bits, Taylor order "
                             f"<= {outcome.order}); theorem count H(min(n,d_h)-1)+1 = "
                             f"{formula}")
                params = {"heads": H, "head_dim": dh, "seed": seed, "attempt": attempt,
                          "epsilon": f"{eps.numerator}/{eps.denominator}",
                          "scale": f"{scale.numerator}/{scale.denominator}",
                          "T": T, "theorem_capacity": formula, "n": n, "d": d,
                          "feature_rank": T, "readout_bits": bits,
                          "kruskal_check": info["kruskal_check"]}
                return BuildResult(spec=spec, params=params, notes=tuple(notes),
                                   hints={"softmax": softmax_hint(outcome)})
            last_error = (f"seed attempt {attempt}: {outcome.status} at {outcome.precision} "
                          f"bits")
    raise ConstructionError(f"mahdavi2024-mha could not certify T = {T} examples with H = {H}, "
                            f"d_h = {dh} (theorem count {formula}); last: {last_error}")


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Theorem 1: capacity ``H (min(n, d_h) - 1) + 1``; parameters ``Theta(H d (d_h + d_v))``."""
    if "heads" not in kw:  # the caller did not pass the construction's parameters
        return {"capacity": "H (min(n, d_h) - 1) + 1 (n = context size = seq_len - 1)",
                "params_order": "Theta(H d (d_h + d_v))"}
    H, dh = int(kw["heads"]), int(kw.get("head_dim", 2))
    ctx = max(n - 1, 1)
    return {"capacity": capacity(H, dh, ctx), "params_order": f"Theta(H d (d_h + d_v)) with "
            f"H={H}, d={d}, d_h={dh}, d_v={dh}: ~{H * d * 2 * dh + d}"}


CONSTRUCTION = Construction(
    name="mahdavi2024-mha",
    summary="one softmax MHA layer (query = first token, no residual) + linear readout, "
            "H(min(n,d_h)-1)+1 examples, certified within epsilon",
    reference="Mahdavi, Liao & Thrampoulidis, ICLR 2024, Theorem 1 (Assumptions 1-2)",
    tasks=("next-token",),
    inputs=("vectors",),
    build=build,
    options=(
        Option("heads", int, 2, "number of heads H"),
        Option("head_dim", int, 2, "head dimension d_h"),
        Option("seed", int, 0, "random seed for the query/key weights"),
        Option("epsilon", str, "1/4", "certified tolerance |f(X) - y| <= epsilon"),
        Option("scale", str, "1/2",
               "query/key weights are random multiples of 1/8 in [-2, 2], times scale"),
        Option("kruskal_limit", int, 20000, "exhaustive Kruskal check up to this many subsets"),
        Option("kruskal_samples", int, 2000, "random subsets checked above the limit"),
        Option("readout", str, "epsilon",
               "'epsilon': outputs certified within epsilon of the labels; 'exact': the "
               "features are exposed and the checker proves that an exact real readout "
               "exists (Theorem 1's statement)"),
    ),
    bound=bound,
)
