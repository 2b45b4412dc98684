"""Size figures beside the theorems: the upper bound, the lower bounds, the bits.

:func:`figures` takes a built network, its dataset and the construction's recorded params
(what a certificate holds) and returns, for ``exactmem info``:

* ``bound``: the construction's theorem bound (its ``bound`` function: width, depth, bits and
  parameters *with* the width factor, at the real ``r / delta`` the params record);
* ``lower_bounds`` (parameters), each with the exact form used:

  - ``thm_4_2`` (Kajitsuka & Sato Thm 4.2 / B.2, next-token, any attention; for a ReLU
    network the VC argument behind Vardi et al.'s matching bound is the same): ``sqrt(N)``.
    The paper proves ``Omega(sqrt N)`` from the ``O(W^2)`` VC bound of Goldberg & Jerrum and
    states no constant; the constant is taken as 1.
  - ``thm_4_3`` (Thm 4.3 / B.3, seq2seq, hardmax, all ``nN`` tokens distinct): the explicit
    form at the end of its proof, ``sqrt(nN / (9 log2(48 e nN)))``.
  - ``counting``: a network that memorizes *every* labelling of its N label positions with C
    classes takes ``C^N`` distinct weight settings; a weight whose numerator and denominator
    have at most ``b`` bits (and a sign) takes at most ``2^(2b + 1)`` values, so
    ``nonzero x (2 max_bits + 1) >= N log2 C`` for a fixed sparsity pattern; the figure is the
    least nonzero count at the network's own ``max_bits``.

  These bound the worst case over labellings of some dataset (Thm 4.3 also needs distinct
  tokens); they are the yardstick, not a statement about this dataset.
* ``optimality_gap``: measured / lower bound, for each lower bound (nonzero parameters), and
  ``bits``: the network's total weight bits over the ``N log2 C`` label bits;
* the bit figures: ``weight_bits_total`` = the sum over nonzero weights of the bit lengths of
  the reduced numerator and denominator (exact, not ``max_bits x nonzero``, which is given
  as ``weight_bits_max_nonzero``); ``label_bits`` = ``N log2 C`` with N the label positions
  (N next-token, nN seq2seq); ``label_bits_per_param`` = label bits / nonzero parameters;
  ``label_bits_per_stored_bit`` = ``label_bits_per_param / max_bits`` (per bit of a
  ``max_bits``-bit weight) and ``label_bits_per_weight_bit`` = label bits / total weight bits;
* ``params_split``: nonzero parameters of the embedding (token ids: the lookup table the
  certificate grammar puts first) and of the rest.

Only the certificate's network and dataset are read; its ``sizes`` keys stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.model.dataset import Dataset
from exactmem.model.sizes import matrices, sizes
from exactmem.model.spec import Embedding, NetworkSpec


def weight_bits(m: ScaledMatrix) -> int:
    """Sum over nonzero entries of ``bitlen(|numerator|) + bitlen(denominator)`` (reduced)."""
    total = 0
    for row in m.num:
        for x in row:
            if x:
                g = math.gcd(x, m.den)
                total += abs(x // g).bit_length() + (m.den // g).bit_length()
    return total


def label_positions(ds: Dataset) -> int:
    """Labels the network must produce: N (next-token) or nN (seq2seq)."""
    return ds.N if ds.task == "next-token" else ds.N * ds.n


def lower_bounds(task: str, N: int, n: int, C: int, nonzero: int,  # noqa: N803
                 max_bits: int) -> dict[str, Any]:
    """Parameter lower bounds for N sequences of length n (see the module docstring).

    Each entry: ``value`` (parameters), ``form`` (the formula used) and ``gap`` (``nonzero``
    over ``value``).  Thm 4.2 applies to seq2seq too: a seq2seq memorizer also memorizes the
    last position of N sequences.
    """
    points = N if task == "next-token" else n * N
    label_bits = points * math.log2(C) if C > 1 else 0.0
    out: dict[str, Any] = {
        "thm_4_2": {"value": math.sqrt(N),
                    "form": "sqrt(N): Kajitsuka & Sato Thm 4.2, Omega(sqrt N) with the "
                            "constant taken as 1 (the paper states none)"},
        "counting": {"value": label_bits / (2 * max_bits + 1),
                     "form": "N log2 C / (2 max_bits + 1): C^N labellings need that many "
                             "weights of max_bits-bit numerator and denominator and a sign"},
    }
    if task == "seq2seq":
        out["thm_4_3"] = {"value": math.sqrt(points / (9 * math.log2(48 * math.e * points))),
                          "form": "sqrt(nN / (9 log2(48 e nN))): Kajitsuka & Sato Thm 4.3 "
                                  "(hardmax, all nN tokens distinct), explicit in its proof"}
    for v in out.values():
        v["value"] = round(v["value"], 3)
        v["gap"] = round(nonzero / v["value"], 3) if v["value"] > 0 else None
    return out


def params_split(spec: NetworkSpec) -> dict[str, int]:
    """Nonzero parameters of the embedding (if any) and of every other layer."""
    emb = sum(layer.table.nonzeros() for layer in spec.layers if isinstance(layer, Embedding))
    total = sum(m.nonzeros() for m in matrices(spec))
    return {"embedding_nonzero": emb, "rest_nonzero": total - emb}


def bit_figures(spec: NetworkSpec, ds: Dataset) -> dict[str, Any]:
    sz = sizes(spec)
    C = ds.num_classes  # noqa: N806
    label_bits = label_positions(ds) * math.log2(C) if C > 1 else 0.0
    total = sum(weight_bits(m) for m in matrices(spec))
    per_param = label_bits / sz.params_nonzero if sz.params_nonzero else 0.0
    return {
        "label_bits": round(label_bits, 3),
        "weight_bits_total": total,
        "weight_bits_max_nonzero": sz.max_bits * sz.params_nonzero,
        "label_bits_per_param": round(per_param, 6),
        "label_bits_per_stored_bit": round(per_param / sz.max_bits, 6) if sz.max_bits else 0.0,
        "label_bits_per_weight_bit": round(label_bits / total, 6) if total else 0.0,
    }


def figures(spec: NetworkSpec, ds: Dataset, construction: str | None,
            params: Mapping[str, Any]) -> dict[str, Any]:
    """Every figure of the module docstring for one network (a certificate's, for ``info``)."""
    from exactmem import constructions
    from exactmem.errors import UnknownConstructionError

    sz = sizes(spec)
    out: dict[str, Any] = {**params_split(spec), **bit_figures(spec, ds)}
    low = lower_bounds(ds.task, ds.N, ds.n, ds.num_classes, sz.params_nonzero, sz.max_bits)
    out["lower_bounds"] = low
    gap: dict[str, Any] = {f"params_over_{k}": v["gap"] for k, v in low.items()}
    label_bits = out["label_bits"]
    gap["weight_bits_over_label_bits"] = (round(out["weight_bits_total"] / label_bits, 3)
                                          if label_bits else None)
    out["optimality_gap"] = gap
    try:
        con = constructions.get(construction or "")
    except UnknownConstructionError:
        con = None
    if con is not None and con.bound is not None:
        d = ds.dim if ds.inputs == "vectors" else ds.vocab_size
        rest = {k: v for k, v in params.items()
                if k not in ("N", "n", "d", "C", "inputs", "task")}
        b = dict(con.bound(N=ds.N, n=ds.n, d=d, C=ds.num_classes, inputs=ds.inputs,
                           task=ds.task, **rest))
        out["bound"] = b
        out["measured_over_bound"] = {
            key: round(mine / b[key], 4) for key, mine in
            (("params", sz.params_nonzero), ("depth", sz.depth), ("width", sz.width),
             ("bits", sz.max_bits)) if isinstance(b.get(key), int | float) and b[key]}
    return out
