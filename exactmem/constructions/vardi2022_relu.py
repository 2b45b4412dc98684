"""``vardi2022-relu``: the O~(sqrt N) ReLU memorizer (Vardi, Yehudai & Shamir, ICLR 2022), as
restated by Kajitsuka & Sato (ICLR 2025) Lemma C.1.

For datasets of single tokens (``n = 1``): N distinct points in ``Q^d`` (or token ids) with
labels in ``{0..C-1}``.  The network is ``F_3 o F_2 o F_1``:

* Stage I (Lemma C.2): ``x -> relu(w . x + b)`` with a random integer direction scaled so
  distinct points are >= 2 apart and >= 2 (the least gap is computed exactly); token ids are
  embedded as ``2 (t + 1)`` instead;
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
from exactmem.constructions._gadgets import ONE, Program, stage_one_projection
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import require_no_conflicting_duplicates
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
    if ds.inputs == "token-ids":
        assert ds.vocab_size is not None
        layers.append(Embedding(ScaledMatrix.from_rows([[2 * (t + 1)
                                                         for t in range(ds.vocab_size)]])))
        xs = [Fraction(2 * (t + 1)) for t in tokens]
        prog = Program(["x"])
        input_dim, top = ds.vocab_size, Fraction(2 * ds.vocab_size)
    else:
        assert ds.dim is not None
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
                                          "projection_top": str(top)})


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Lemma C.1: width 12, depth ~ sqrt(N log N) + sqrt(N / log N) max(log R, log C),
    bits ~ log d + sqrt(N / log N) max(log R, log C), R = 20 r N^2 sqrt(pi d) / delta
    (with r / delta = 1)."""
    N = max(N, 2)  # noqa: N806
    R = 20 * N ** 2 * math.sqrt(math.pi * max(d, 1))  # noqa: N806
    lg = math.log2(N)
    term = math.sqrt(N / lg) * max(math.log2(R), math.log2(max(C, 2)))
    return {"lemma": "C.1", "R": f"{R:.4g}", "width": 12,
            "depth": round(math.sqrt(N * lg) + term),
            "bits": round(math.log2(max(d, 2)) + term),
            "note": "constants as printed, hidden constant factors 1, r/delta = 1, logs base 2"}


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
