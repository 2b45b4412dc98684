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
* the bit figures (one definition each, shared by ``info`` and ``scripts/float_ready_table.py``):
  ``label_bits`` = ``N log2 C`` with N the label positions (N next-token, nN seq2seq);
  ``weight_bits_total`` = the sum over nonzero weights of the bit lengths of the reduced
  numerator and denominator (exact, not ``max_bits x nonzero``, which is given as
  ``weight_bits_max_nonzero``); and label bits per

  - ``label_bits_per_nonzero``: nonzero parameter;
  - ``label_bits_per_dense``: dense parameter (every entry of every tensor a user loads, zeros
    included: ``params_dense``, the count trained-model figures use);
  - ``label_bits_per_stored_bit``: stored bit of the exported file, ``stored_bits`` =
    ``params_dense x`` the storage bits of ``stored_dtype`` (16 / 16 / 32 / 64 for bfloat16 /
    float16 / float32 / float64): the narrowest format the certificate claims float-exact,
    else float64, ``exactmem export``'s default (``stored_dtype_exact`` says whether the
    file memorizes).  For the narrow-weight claims (:data:`NARROW_STORAGE`) the file is the
    one ``exactmem export --dtype int8|bfloat16`` writes, and ``stored_bits`` is the sum over
    its tensors of entries x bits of the dtype the export writes the tensor in
    (:func:`storage_dtype`, the one rule export and ``info`` share): a weight matrix int8 /
    bfloat16; every other tensor (biases, embedding and position tables) the narrowest of
    int8 / int16 / int32 that holds all its values (int8 claim), or bfloat16 when every value
    is a zero or normal bfloat16 number, else float32 (bfloat16 claim) -- exactly the tensor
    bytes of the safetensors file x 8 (``stored_split`` gives the entries per dtype);
    ``params_narrow`` counts the weight-matrix entries (:func:`narrow_split`) and
    ``label_bits_per_narrow`` divides by it (the figure "bits per int8 / bf16
    parameter").  Of several claims the one with the fewest stored bits is used;
  - ``label_bits_per_weight_bit``: total weight bit (``weight_bits_total``);
* ``float_ready`` (``--max-bits P`` networks of the Kajitsuka & Sato shape): Theorem E.1 /
  B.1 does not describe them (they hash contexts into retrieval tables,
  docs/float-ready.md), so ``bound`` is their own: ``Theta(N b / P)`` parameters, with the
  ``3 ceil(M / f)`` label words as its leading term, and every weight an integer below
  ``2^P``; the lower bounds add ``counting_P``: ``N log2 C / (P + 1)``, the counting bound
  for weights that are integers of magnitude below ``2^P`` with a sign;
* ``params_split``: nonzero parameters of the embedding (token ids: the lookup table the
  certificate grammar puts first) and of the rest.

Only the certificate's network and dataset are read; its ``sizes`` keys stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.model.dataset import Dataset
from exactmem.model.sizes import matrices, sizes
from exactmem.model.spec import Attention, Embedding, Linear, NetworkSpec


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


STORAGE_BITS = {"bfloat16": 16, "float16": 16, "float32": 32, "float64": 64}
"""Bits per stored value of each export dtype (IEEE binary16 / 32 / 64, bfloat16)."""
EXPORT_DEFAULT = "float64"
FLOAT_READY = ("kajitsuka2025-next-token", "kajitsuka2025-seq2seq")
"""Constructions whose ``max_bits = P`` variant is the float-ready retrieval network."""


NARROW_STORAGE: dict[str, tuple[str, tuple[str, ...]]] = {
    "int8": ("int8", ("int8", "int16", "int32")),
    "bfloat16-weights/float32": ("bfloat16", ("bfloat16", "float32")),
}
"""Narrow-weight claim -> (dtype of the weight matrices, dtypes of every other tensor,
narrowest first): the tensors ``exactmem export --dtype int8|bfloat16`` writes
(docs/float-exact.md); the runtimes widen the others to int32 / float32 on load."""
DTYPE_BITS = {"int8": 8, "int16": 16, "int32": 32, "bfloat16": 16, "float32": 32}
"""Bits per stored entry of each dtype a narrow export writes."""


def bf16_exact(x: int, den: int) -> bool:
    """``x / den`` is zero or a normal bfloat16 number (8 significand bits, exponent in
    ``[-126, 127]``): bfloat16 holds it exactly and no runtime flushes it."""
    if x == 0:
        return True
    g = math.gcd(x, den)
    p, q = abs(x) // g, den // g
    if q & (q - 1):
        return False
    odd = p >> ((p & -p).bit_length() - 1)
    exponent = p.bit_length() - 1 - (q.bit_length() - 1)
    return odd.bit_length() <= 8 and -126 <= exponent <= 127


def storage_dtype(claim: str, m: ScaledMatrix, weight: bool) -> str:
    """The dtype ``exactmem export`` writes tensor ``m`` in under a narrow ``claim``
    (:data:`NARROW_STORAGE`): a weight matrix in the claim's narrow dtype, any other tensor
    in the narrowest of the others that holds every value exactly (the widest when none
    does: the export then refuses the value)."""
    narrow, others = NARROW_STORAGE[claim]
    if weight:
        return narrow
    values = [x for row in m.num for x in row]
    if others[0] == "bfloat16":
        return others[0] if all(bf16_exact(x, m.den) for x in values) else others[-1]
    if any(x % m.den for x in values):
        return others[-1]
    lo, hi = min(values, default=0) // m.den, max(values, default=0) // m.den
    for dt in others:
        half = 1 << (DTYPE_BITS[dt] - 1)
        if -half <= lo and hi < half:
            return dt
    return others[-1]


def _tensors(spec: NetworkSpec) -> list[tuple[ScaledMatrix, bool]]:
    """``(tensor, is_weight_matrix)`` for every stored tensor of ``spec``: the weight
    matrices (every ``weight`` of a linear or feed-forward map, every
    ``query``/``key``/``value``/``output`` of a head) and the rest (biases, the embedding
    and position tables)."""
    out: list[tuple[ScaledMatrix, bool]] = []
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            out += [(m, False) for m in (layer.table, layer.positions) if m is not None]
            continue
        if isinstance(layer, Attention):
            mats = [m for h in layer.heads for m in (h.query, h.key, h.value, h.output)]
            vecs = [b for h in layer.heads for b in (h.query_bias, h.key_bias, h.value_bias,
                                                      h.output_bias)]
        else:
            maps = [layer.map] if isinstance(layer, Linear) else list(layer.layers)
            mats, vecs = [a.weight for a in maps], [a.bias for a in maps]
        out += [(m, True) for m in mats] + [(b, False) for b in vecs if b is not None]
    return out


def narrow_split(spec: NetworkSpec) -> tuple[int, int]:
    """``(narrow, wide)`` dense entries: the weight matrices and the rest (:func:`_tensors`)
    -- the split of the narrow claims."""
    narrow = wide = 0
    for m, weight in _tensors(spec):
        if weight:
            narrow += len(m.num) * m.cols
        else:
            wide += len(m.num) * m.cols
    return narrow, wide


def stored_split(spec: NetworkSpec, claim: str) -> dict[str, int]:
    """Entries per dtype of the file a narrow ``claim``'s export writes
    (:func:`storage_dtype`), in :data:`DTYPE_BITS` order, dtypes with no entry left out."""
    count = dict.fromkeys(DTYPE_BITS, 0)
    for m, weight in _tensors(spec):
        count[storage_dtype(claim, m, weight)] += len(m.num) * m.cols
    return {dt: c for dt, c in count.items() if c}


def stored_bits_of(split: Mapping[str, int]) -> int:
    """Stored bits of a :func:`stored_split`: entries x bits of their dtype."""
    return sum(c * DTYPE_BITS[dt] for dt, c in split.items())


def stored_dtype(float_exact: Sequence[str] = ()) -> tuple[str, bool]:
    """``(dtype, exact)``: the narrowest claimed float-exact format, else the export default."""
    known = [f for f in float_exact if f in STORAGE_BITS]
    if known:
        return min(known, key=lambda f: (STORAGE_BITS[f], f)), True
    return EXPORT_DEFAULT, False


def bit_figures(spec: NetworkSpec, ds: Dataset,
                float_exact: Sequence[str] = ()) -> dict[str, Any]:
    """The bit figures of the module docstring; ``float_exact`` is the certificate's claim."""
    sz = sizes(spec)
    C = ds.num_classes  # noqa: N806
    label_bits = label_positions(ds) * math.log2(C) if C > 1 else 0.0
    total = sum(weight_bits(m) for m in matrices(spec))
    dtype, exact = stored_dtype(float_exact)
    stored = sz.params_dense * STORAGE_BITS[dtype]
    narrow_out: dict[str, Any] = {}
    claims = [c for c in float_exact if c in NARROW_STORAGE]
    if claims:
        splits = {c: stored_split(spec, c) for c in claims}
        bits = {c: stored_bits_of(splits[c]) for c in claims}
        best = min(claims, key=lambda c: (bits[c], c))
        if not exact or bits[best] < stored:
            dtype, exact, stored = NARROW_STORAGE[best][0], True, bits[best]
        narrow_out = {"params_narrow": narrow_split(spec)[0], "narrow_claim": best,
                      "stored_split": splits[best]}

    def per(x: int) -> float:
        return round(label_bits / x, 6) if x else 0.0

    if narrow_out:
        narrow_out["label_bits_per_narrow"] = per(narrow_out["params_narrow"])
    return {**narrow_out,
        "label_bits": round(label_bits, 3),
        "weight_bits_total": total,
        "weight_bits_max_nonzero": sz.max_bits * sz.params_nonzero,
        "label_bits_per_nonzero": per(sz.params_nonzero),
        "label_bits_per_dense": per(sz.params_dense),
        "stored_dtype": dtype,
        "stored_dtype_exact": exact,
        "stored_bits": stored,
        "label_bits_per_stored_bit": per(stored),
        "label_bits_per_weight_bit": per(total),
    }


def float_ready_bound(points: int, C: int, params: Mapping[str, Any]) -> dict[str, Any]:  # noqa: N803
    """The ``--max-bits P`` network's own size (docs/float-ready.md), from its recorded params.

    ``Theta(N b / P)`` parameters; the leading term is the ``3 ceil(M / f)`` label words (``M``
    slots per table, about ``1.24 / 3`` per context; ``f = floor((P - 2) / b)`` fields of ``b``
    bits per word); block selection (about ``sqrt M`` per table), extraction (``24 f b`` per
    table), the embedding and the mod steps come on top.  Every weight is an integer below
    ``2^P``: ``bits = P``.  No width or depth bound is claimed.
    """
    from exactmem.constructions.kajitsuka2025_float import table_slots

    P = int(params["max_bits"])  # noqa: N806
    b = int(params.get("label_bits") or max(1, (max(C, 2) - 1).bit_length()))
    M = int(params.get("table_slots") or table_slots(int(params.get("contexts") or points)))  # noqa: N806
    f = int(params.get("fields_per_word") or max(1, (P - 2) // b))
    return {"construction": "float-ready retrieval network (--max-bits P, docs/float-ready.md); "
                            "Theorem E.1 / B.1 does not describe it",
            "form": "params = Theta(N b / P); leading term 3 ceil(M / f) label words",
            "params": 3 * -(-M // f), "bits": P, "P": P, "b": b, "table_slots": M,
            "fields_per_word": f}


def counting_p(label_bits: float, P: int, nonzero: int) -> dict[str, Any]:  # noqa: N803
    """``N log2 C / (P + 1)``: weights that are integers of magnitude below ``2^P`` with a
    sign take at most ``2^(P + 1)`` values each."""
    value = round(label_bits / (P + 1), 3)
    return {"value": value, "gap": round(nonzero / value, 3) if value > 0 else None,
            "form": f"N log2 C / (P + 1) with P = {P}: C^N labellings need that many weights "
                    f"that are integers below 2^P with a sign"}


def network_bound(construction: str | None, ds: Dataset,
                  params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bound that describes this network: the float-ready one for a ``max_bits`` build of
    :data:`FLOAT_READY`, else the construction's theorem (``None`` where it states none)."""
    from exactmem import constructions
    from exactmem.errors import UnknownConstructionError

    if construction in FLOAT_READY and int(params.get("max_bits") or 0) > 0:
        return float_ready_bound(label_positions(ds), ds.num_classes, params)
    try:
        con = constructions.get(construction or "")
    except UnknownConstructionError:
        return None
    if con.bound is None:
        return None
    d = ds.dim if ds.inputs == "vectors" else ds.vocab_size
    rest = {k: v for k, v in params.items() if k not in ("N", "n", "d", "C", "inputs", "task")}
    return dict(con.bound(N=ds.N, n=ds.n, d=d, C=ds.num_classes, inputs=ds.inputs,
                          task=ds.task, **rest))


def figures(spec: NetworkSpec, ds: Dataset, construction: str | None,
            params: Mapping[str, Any], float_exact: Sequence[str] = ()) -> dict[str, Any]:
    """Every figure of the module docstring for one network (a certificate's, for ``info``)."""
    sz = sizes(spec)
    out: dict[str, Any] = {**params_split(spec), **bit_figures(spec, ds, float_exact)}
    low = lower_bounds(ds.task, ds.N, ds.n, ds.num_classes, sz.params_nonzero, sz.max_bits)
    b = network_bound(construction, ds, params)
    if b is not None and "P" in b:
        low["counting_P"] = counting_p(out["label_bits"], b["P"], sz.params_nonzero)
    out["lower_bounds"] = low
    gap: dict[str, Any] = {f"params_over_{k}": v["gap"] for k, v in low.items()}
    label_bits = out["label_bits"]
    gap["weight_bits_over_label_bits"] = (round(out["weight_bits_total"] / label_bits, 3)
                                          if label_bits else None)
    out["optimality_gap"] = gap
    if b is not None:
        out["bound"] = b
        out["measured_over_bound"] = {
            key: round(mine / b[key], 4) for key, mine in
            (("params", sz.params_nonzero), ("depth", sz.depth), ("width", sz.width),
             ("bits", sz.max_bits)) if isinstance(b.get(key), int | float) and b[key]}
    return out
