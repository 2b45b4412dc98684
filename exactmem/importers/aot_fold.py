"""Dana et al.'s experimental attention-only model, read exactly as a :class:`NetworkSpec`.

The model of the paper's experiments (Dana, Pydi & Chevaleyre, AISTATS 2025, §5 and the
authors' ``models.py``; ``papers.md`` §4) differs from its theory model: the residual
``e(t)`` (dim ``d``) is compressed to ``d_h`` by one shared map ``C``, a positional
embedding ``pos_k`` (dim ``d_h``) is added after the compression, every head is a separate
one-head ``nn.MultiheadAttention(d_h, 1)`` (in/out projections with biases, score scale
``1/sqrt(d_h)``, causal mask), the heads are summed and decompressed by one shared map
``D`` (``d_h -> d``) and added to the residual, and the unembedding ``U`` (``d -> N``)
reads the last position:

    logits = U (e(t_S) + D sum_h MHA_h(C e(t) + pos)_S)

It folds exactly into the column convention of the spec with a residual stream
``x_k = [e(t_k); pos_k]`` of dimension ``d + d_h``: with ``P = [C | I]`` (so
``P x_k = C e(t_k) + pos_k``), head ``h`` has ``W_Q = W_q P``, ``W_K = W_k P``,
``W_V = W_v P``, ``W_O = [D W_o; 0]``, biases ``b_q, b_k, b_v`` and ``b_O = [D b_o; 0]``;
the readout is the linear map ``[U | 0]`` and argmax at the last position.  Every product
is computed in exact rationals from the float weights (each a dyadic rational), so the
spec *is* the trained network evaluated in real arithmetic (with the score scale given).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.importers.import_model import _as_float64
from exactmem.model.spec import Affine, Attention, Embedding, Head, Linear, NetworkSpec, Readout

Rows = list[list[Fraction]]
_HEAD = re.compile(r"heads\.(\d+)\.in_proj_weight")


def _rows(state: Mapping[str, Any], name: str, shape: tuple[int, ...]) -> Rows:
    if name not in state:
        raise SpecError(f"the attention-only model lacks the tensor {name!r}")
    a, _ = _as_float64(name, state[name])
    if a.shape != shape:
        raise SpecError(f"{name}: expected shape {shape}, found {tuple(a.shape)}")
    if not np.isfinite(a).all():
        raise SpecError(f"{name}: holds an infinity or NaN")
    rows = a.reshape(shape[0], -1).tolist()
    return [[Fraction(x) for x in r] for r in rows]


def _mul(a: Rows, b: Rows) -> Rows:
    return [[sum((x * b[k][j] for k, x in enumerate(row) if x), Fraction(0))
             for j in range(len(b[0]))] for row in a]


def _t(a: Rows) -> Rows:
    return [list(c) for c in zip(*a, strict=True)]


def _m(a: Rows) -> ScaledMatrix:
    return ScaledMatrix.from_rows(a, cols=len(a[0]))


def spec_from_aot(state: Mapping[str, Any], seq_len: int,
                  scale: Fraction | None = None) -> NetworkSpec:
    """The exact spec of a trained attention-only model (the ``state_dict`` of
    :class:`exactmem.exporters.torch.AttentionOnly`).  ``scale``: the score scale; by
    default the float ``1/sqrt(d_h)`` torch multiplies the queries by, read exactly."""
    if "embed.weight" not in state or "compress.weight" not in state:
        raise SpecError("not an attention-only model state dict: 'embed.weight' and "
                        "'compress.weight' expected")
    vocab, d = _as_float64("embed.weight", state["embed.weight"])[0].shape
    d_h = _as_float64("compress.weight", state["compress.weight"])[0].shape[0]
    heads = sorted(int(m.group(1)) for k in state if (m := _HEAD.fullmatch(k)))
    if not heads or heads != list(range(len(heads))):
        raise SpecError("the attention-only model has no heads.0 ... heads.{H-1}")
    if scale is None:
        scale = Fraction(float(1 / np.sqrt(np.float64(d_h))))
    emb = _rows(state, "embed.weight", (vocab, d))
    comp = _rows(state, "compress.weight", (d_h, d))
    pos = _rows(state, "pos", (seq_len, d_h))
    dec = _rows(state, "decompress.weight", (d, d_h))
    unemb = _rows(state, "unembed.weight", (vocab, d))
    zero_h = [Fraction(0)] * d_h
    table = _t([row + zero_h for row in emb])  # width x vocab: [e(t); 0]
    positions = _t([[Fraction(0)] * d + row for row in pos])  # width x n: [0; pos_k]
    proj = [c + [Fraction(int(i == j)) for j in range(d_h)] for i, c in enumerate(comp)]
    out_heads = []
    for h in heads:
        w_in = _rows(state, f"heads.{h}.in_proj_weight", (3 * d_h, d_h))
        b_in = _rows(state, f"heads.{h}.in_proj_bias", (3 * d_h,))
        w_o = _rows(state, f"heads.{h}.out_proj.weight", (d_h, d_h))
        b_o = _rows(state, f"heads.{h}.out_proj.bias", (d_h,))
        q, k, v = (_mul(w_in[i * d_h:(i + 1) * d_h], proj) for i in range(3))
        bq, bk, bv = (_m(b_in[i * d_h:(i + 1) * d_h]) for i in range(3))
        out = _mul(dec, w_o) + [zero_h[:] for _ in range(d_h)]
        shift = _mul(dec, b_o) + [[Fraction(0)] for _ in range(d_h)]
        out_heads.append(Head(_m(q), _m(k), _m(v), _m(out), query_bias=bq, key_bias=bk,
                              value_bias=bv, output_bias=_m(shift), scale=scale))
    readout = [row + zero_h for row in unemb]
    return NetworkSpec(
        "token-ids", vocab, seq_len,
        (Embedding(_m(table), _m(positions)),
         Attention(tuple(out_heads), kind="softmax", residual=True, causal=True),
         Linear(Affine(_m(readout)))),
        Readout("argmax", "last"))
