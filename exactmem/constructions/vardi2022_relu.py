"""``vardi2022-relu``: the O~(sqrt N) ReLU memorizer (Vardi, Yehudai & Shamir, ICLR 2022), as
restated by Kajitsuka & Sato (ICLR 2025) Lemma C.1.

For datasets of single tokens (``n = 1``): N distinct points in ``Q^d`` (or token ids) with
labels in ``{0..C-1}``.  The network is ``F_3 o F_2 o F_1``:

* Stage I (Lemma C.2): ``x -> relu(w . x + b)`` with a random integer direction scaled so
  distinct points are >= 2 apart and >= 2 (the least gap is computed exactly).  Token ids
  enter through the lookup table the certificate grammar puts first (``1 x omega``, every
  entry counted); it maps the token of rank ``i`` among the dataset's tokens to ``2 (i + 1)``
  and every unused id to 0, so it holds N nonzero parameters, not omega (N - 1 is the least
  any table can hold: the N tokens need pairwise distinct columns), and the points span
  ``[2, 2N]`` instead of ``[2, 2 omega]`` (fewer bits per floor field);
* Stage II (Lemma G.3): ``m`` blocks of ``k`` points, one interval indicator (Lemma G.2) per
  block loads the block's packed floors ``u_j`` and packed labels ``w_j``;
* Stage III (Lemmas G.4-G.6): the fields are peeled off bit by bit and the label of the field
  equal to ``floor(x)`` is output (labels are stored shifted by 1, 0 meaning "no match").

Size: width <= 12 (11 channels here), depth ``m + k max(rho, c) + O(1)``, weights of
``k max(rho, c)`` bits, ``Theta(m + k rho)`` nonzero parameters: ``~ sqrt(N log N)`` with the
paper's ``m = sqrt(N log N)``, ``k = sqrt(N / log N)``.  ``--block-size`` sets ``k`` (depth vs
bits); ``--block-points B`` is Thm F.1's bounded-bit variant (sub-networks of ``B^2`` points,
weights of ``~ B`` bits, depth ``~ N / B``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.constructions._gadget_chain import emit_chain
from exactmem.constructions._gadgets import ONE, Program
from exactmem.constructions._projection import stage_one_projection
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import (
    require_no_conflicting_duplicates,
    separation_squared,
)
from exactmem.model.spec import Embedding, Layer, NetworkSpec, Readout


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """Lemma C.1 on the dataset's single tokens (see the module docstring)."""
    if ds.n != 1:
        raise AssumptionError(f"vardi2022-relu memorizes points: sequences of length n = 1, "
                              f"the dataset has n = {ds.n}")
    require_no_conflicting_duplicates(ds)
    seed = int(options.get("seed", 0))
    block_size = int(options.get("block_size", 0))
    group = int(options.get("block_points", 0)) ** 2
    if block_size < 0 or group < 0:
        raise ConstructionError("block_size and block_points must be >= 0")
    labels: dict[Any, int] = {}
    for seq, y in zip(ds.sequences, ds.labels, strict=True):
        labels[seq[0]] = (y if isinstance(y, int) else y[0]) + 1
    tokens = list(labels)
    layers: list[Layer] = []
    facts_in: dict[str, Any] = {}
    if ds.inputs == "token-ids":
        assert ds.vocab_size is not None
        rank = {t: i for i, t in enumerate(sorted(tokens))}
        layers.append(Embedding(ScaledMatrix.from_rows(
            [[2 * (rank[t] + 1) if t in rank else 0 for t in range(ds.vocab_size)]])))
        xs = [Fraction(2 * (rank[t] + 1)) for t in tokens]
        prog = Program(["x"])
        input_dim, top = ds.vocab_size, Fraction(2 * len(tokens))
    else:
        assert ds.dim is not None
        sep = separation_squared(ds)
        assert sep is not None
        # Assumption 4.1's r and delta (r >= 1, delta <= 1), recorded for the bound
        facts_in = {"delta_squared": str(min(sep[0], Fraction(1)) if sep[0] > 0 else Fraction(1)),
                    "r_squared": str(max(sep[1], Fraction(1)))}
        proj = stage_one_projection(tokens, random.Random(seed))
        xs = list(proj.values)
        names = [f"v{i}" for i in range(ds.dim)]
        prog = Program(names)
        prog.step({"x": {**dict(zip(names, proj.weight, strict=True)), ONE: proj.bias}})
        input_dim, top = ds.dim, proj.top
    facts, out = emit_chain(prog, xs, [labels[t] for t in tokens], (), block_size, group)
    prog.step({"y": {**out, ONE: out.get(ONE, 0) - 1}})
    layers.append(prog.feedforward())
    spec = NetworkSpec(input_kind=ds.inputs, input_dim=input_dim, seq_len=1,
                       layers=tuple(layers), readout=Readout("scalar", "last"))
    return BuildResult(spec=spec, params={"seed": seed, "block_size": block_size,
                                          "block_points": int(options.get("block_points", 0)),
                                          "points": len(tokens), "lemma_c1": facts,
                                          "projection_top": str(top), **facts_in})


WIDTH = 12  # Lemma C.1


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Lemma C.1 for a certificate (``kw``: its construction params and ``inputs``).

    Width 12, ``depth = sqrt(N L) + T``, ``bits = log2 d + T`` with ``L = log2 N``,
    ``T = sqrt(N / L) max(log2 R, log2 C)``, ``R = 20 (r / delta) N^2 sqrt(pi d)``; hidden
    constant factors 1, logs base 2.  Vectors: ``r / delta`` from the recorded ``r_squared``
    and ``delta_squared``.  Token ids: the lemma sees the table's 1-D integer points, so
    ``d = 1`` and ``r / delta = N``.  ``params = E_in + depth W (W + 1)`` with ``W = 12``
    (every affine map ``W x W`` plus its bias), ``E_in`` the ``1 x omega`` table (ids) or
    ``W d`` (vectors).
    """
    N = max(N, 2)  # noqa: N806
    ids = kw.get("inputs") == "token-ids"
    if ids:
        rd, dim = float(N), 1
    else:
        r2, d2 = kw.get("r_squared"), kw.get("delta_squared")
        rd = math.sqrt(Fraction(r2) / Fraction(d2)) if r2 is not None and d2 is not None else 1.0
        dim = max(d, 1)
    R = 20 * rd * N ** 2 * math.sqrt(math.pi * dim)  # noqa: N806
    lg = math.log2(N)
    term = math.sqrt(N / lg) * max(math.log2(R), math.log2(max(C, 2)))
    depth = math.ceil(math.sqrt(N * lg) + term)
    embed = d if ids else WIDTH * d
    return {"lemma": "C.1", "R": f"{R:.4g}", "r_over_delta": round(rd, 6), "width": WIDTH,
            "depth": depth, "bits": math.ceil(math.log2(max(dim, 2)) + term),
            "params": embed + depth * WIDTH * (WIDTH + 1),
            "note": f"constants as printed, hidden constant factors 1, logs base 2, r/delta = "
                    f"{rd:.6g}{' (token ids: the table points, d = 1)' if ids else ''}; params "
                    f"= E_in ({embed}) + depth x W(W+1) with W = {WIDTH}"}


CONSTRUCTION = Construction(
    name="vardi2022-relu",
    summary="O~(sqrt N) width-12 ReLU memorizer of N points (sequences of length 1)",
    reference="Vardi, Yehudai & Shamir, ICLR 2022; Kajitsuka & Sato 2025, Lemma C.1 / Thm F.1",
    tasks=("next-token", "seq2seq"),
    inputs=("token-ids", "vectors"),
    build=build,
    options=(Option("seed", int, 0, "random seed for the Stage-I projection"),
             Option("block_size", int, 0,
                    "points per block k (0: the paper's ceil(N / sqrt(N log N)))"),
             Option("block_points", int, 0,
                    "Thm F.1 bounded bits: sub-networks of B^2 points each (0: one network)")),
    bound=bound,
)
