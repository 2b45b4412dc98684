"""The forward pass in ``p``-bit binary floating point, every operation correctly rounded.

gmpy2's MPFR rounds the result of each ``+``, ``*``, ``/`` (and ``exp`` for softmax) to
nearest, ties to even, at precision ``p``; the evaluation order is fixed, so the result is
deterministic and is a *fact* about ``p``-bit arithmetic, not a float experiment.  The order
is the one :class:`exactmem.exporters.torch.ExactmemNetwork` uses, with dot products summed
left to right:

* weights and vector inputs are rounded once from the exact rationals;
* an affine map is ``((w_1 x_1 + w_2 x_2) + ...) + b`` (a zero weight column is skipped:
  ``0 * x`` is exactly 0 and adding it changes nothing);
* uniform attention: ``(v_1 + ... + v_K) / K``; hardmax: the tied keys (exact comparison of
  the rounded scores) summed in key order, divided by their count; softmax:
  ``e_k = exp(s_k - max)``, ``a_k = e_k / (e_1 + ... + e_K)``, ``sum_k a_k v_k``;
  then ``W_O`` and the residual, as in Kajitsuka & Sato eq. (2).

Token-wise layers are evaluated once per *distinct* column, as in the exact forward pass,
and a feed-forward block in slices of columns (:data:`CHUNK_CELLS` hidden values at a time;
the operations on each column are the same, so is the result), which bounds the memory.
The exponent range is MPFR's default (no overflow in practice) unless the format has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.floats.formats import FloatFormat, mpfr_to_fraction, to_mpfr
from exactmem.model.dataset import Dataset
from exactmem.model.forward import Progress, dedupe_columns, needed_positions, token_index
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
)


@dataclass(slots=True)
class FloatState:
    """``cols[:, index[i, k]]`` is the vector at sequence i, position k (mpfr objects)."""

    cols: np.ndarray  # (dim, u) object
    index: np.ndarray  # (N, n) int64, -1 where no longer needed


def _round_matrix(m: ScaledMatrix, ctx: gmpy2.context) -> list[list[tuple[int, Any]]]:
    """Rows of ``(column, rounded weight)`` for the nonzero weights (a zero weight times a
    finite value is exactly zero and adding it changes nothing, so it is skipped)."""
    small = m.den == 1 and all(abs(x) < (1 << ctx.precision) for row in m.num for x in row)
    rows: list[list[tuple[int, Any]]] = []
    with gmpy2.context(ctx):
        for row in m.num:
            rows.append([(j, gmpy2.mpfr(x) if small else to_mpfr(Fraction(x, m.den), ctx))
                         for j, x in enumerate(row) if x])
    return rows


class _Rounded:
    """Weights of one spec rounded to a format, cached per matrix."""

    def __init__(self, ctx: gmpy2.context) -> None:
        self.ctx = ctx
        self.cache: dict[int, list[list[tuple[int, Any]]]] = {}

    def __call__(self, m: ScaledMatrix) -> list[list[tuple[int, Any]]]:
        key = id(m)
        if key not in self.cache:
            self.cache[key] = _round_matrix(m, self.ctx)
        return self.cache[key]

    def dense(self, m: ScaledMatrix) -> np.ndarray:
        out = _zero_like(m.shape)
        for i, row in enumerate(self(m)):
            for j, v in row:
                out[i, j] = v
        return out


def _zero_like(shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(gmpy2.mpfr(0))
    return out


def _matvec(w: list[list[tuple[int, Any]]], x: np.ndarray,
            bias: np.ndarray | None = None) -> np.ndarray:
    """``w @ x (+ bias)`` summed left to right over the nonzero weights of each row, then
    the bias added (``0 + b`` for a row without weights), every operation rounded."""
    out = _zero_like((len(w), x.shape[1]))
    for i, row in enumerate(w):
        acc: np.ndarray | None = None
        for j, wij in row:
            term = wij * x[j, :]
            acc = term if acc is None else acc + term
        if bias is not None:
            out[i, :] = (out[i, :] if acc is None else acc) + bias[i, 0]
        elif acc is not None:
            out[i, :] = acc
    return out


def _affine(aff: Affine, x: np.ndarray, rw: _Rounded) -> np.ndarray:
    return _matvec(rw(aff.weight), x, None if aff.bias is None else rw.dense(aff.bias))


CHUNK_CELLS = 250_000  # hidden values (mpfr objects) of a feed-forward block held at once


def _feedforward(ff: FeedForward, x: np.ndarray, rw: _Rounded,
                 tick: Callable[[int], None]) -> np.ndarray:
    """The ReLU block on slices of columns; ``tick(ops)`` after each map on a slice."""
    width = max([ff.in_dim] + [a.out_dim for a in ff.layers])
    step = max(16, CHUNK_CELLS // max(width, 1))
    parts = []
    for lo in range(0, x.shape[1], step):
        y = x[:, lo:lo + step]
        for j, aff in enumerate(ff.layers):
            if j > 0:
                y = _relu(y)
            y = _affine(aff, y, rw)
            tick(map_cost(aff) * y.shape[1])
        parts.append(x[:, lo:lo + step] + y if ff.residual else y)
    if not parts:
        return _zero_like((ff.out_dim, 0))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def _relu(x: np.ndarray) -> np.ndarray:
    pos = (x > 0).astype(bool)  # NaN compares false: relu(NaN) is taken as 0 here
    return np.where(pos, x, gmpy2.mpfr(0))


def _seqsum(vals: list[Any]) -> Any:
    acc = vals[0]
    for v in vals[1:]:
        acc = acc + v
    return acc


def _attention(att: Attention, st: FloatState, queries: list[int], rw: _Rounded,
               tick: Callable[[int], None]) -> FloatState:
    """Column-wise attention at ``queries``; ``tick(ops)`` per head and sequence."""
    n = st.index.shape[1]
    keys = list(att.keys) if att.keys is not None else list(range(n))
    if (st.index[:, keys] < 0).any() or (st.index[:, queries] < 0).any():
        raise SpecError("attention needs positions that an earlier stage dropped")
    N = st.index.shape[0]
    cols = st.cols
    m = cols.shape[0]
    total: np.ndarray | None = None
    nk = gmpy2.mpfr(len(keys))
    for head in att.heads:
        vals = _matvec(rw(head.value), cols)  # (s, u)
        s = vals.shape[0]
        agg = np.empty((s, N, len(queries)), dtype=object)
        if att.kind == "uniform" or head.scores_are_zero():
            for i in range(N):
                idx = st.index[i, keys]
                for r in range(s):
                    mean = _seqsum([vals[r, c] for c in idx]) / nk
                    agg[r, i, :] = mean
                tick(head_cost(att, head, len(keys), len(queries)))
        else:
            qm = _matvec(rw(head.query), cols)
            km = _matvec(rw(head.key), cols)
            for i in range(N):
                kidx, qidx = st.index[i, keys], st.index[i, queries]
                for a, qc in enumerate(qidx):
                    scores = [_seqsum([km[r, kc] * qm[r, qc] for r in range(km.shape[0])])
                              for kc in kidx]
                    for r in range(s):
                        agg[r, i, a] = _combine(att.kind, scores, [vals[r, c] for c in kidx])
                tick(head_cost(att, head, len(keys), len(queries)))
        flat = agg.reshape(s, N * len(queries))
        out = _matvec(rw(head.output), flat)
        total = out if total is None else total + out
    assert total is not None
    if att.residual:
        base = cols[:, st.index[:, queries]].reshape(m, N * len(queries))
        total = base + total
    index = np.full(st.index.shape, -1, dtype=np.int64)
    index[:, queries] = np.arange(N * len(queries), dtype=np.int64).reshape(N, len(queries))
    new_cols, new_index = dedupe_columns(total, index)
    return FloatState(new_cols, new_index)


def _combine(kind: str, scores: list[Any], values: list[Any]) -> Any:
    best = max(scores)
    if kind == "hardmax":
        tied = [v for sc, v in zip(scores, values, strict=True) if sc == best]
        return _seqsum(tied) / gmpy2.mpfr(len(tied))
    exps = [gmpy2.exp(sc - best) for sc in scores]
    den = _seqsum(exps)
    return _seqsum([(e / den) * v for e, v in zip(exps, values, strict=True)])


def map_cost(aff: Affine) -> int:
    """Rounded operations of an affine map per column (a product and a sum per nonzero
    weight, a sum per bias entry): the unit of progress."""
    nonzero = sum(1 for row in aff.weight.num for x in row if x)
    return 2 * nonzero + (aff.out_dim if aff.bias is not None else 0)


def head_cost(att: Attention, head: Head, keys: int, queries: int) -> int:
    """Operations of one head on one sequence (scores, weights, weighted sums)."""
    values = head.value.shape[0] * keys
    if att.kind == "uniform" or head.scores_are_zero():
        return values
    return queries * (2 * keys * head.query.shape[0] + 3 * values)


def _units(spec: NetworkSpec, need: list[list[int]], start: int, u: int, N: int) -> int:  # noqa: N803
    """Operations from layer ``start`` on, with ``u`` columns there (after an attention
    layer, ``N`` times its queries columns: an upper bound until the layer has run)."""
    total = 0
    for li in range(start, len(spec.layers)):
        layer = spec.layers[li]
        if isinstance(layer, Linear):
            total += map_cost(layer.map) * u
        elif isinstance(layer, FeedForward):
            total += sum(map_cost(aff) for aff in layer.layers) * u
        elif isinstance(layer, Attention):
            keys = len(layer.keys) if layer.keys is not None else spec.seq_len
            total += N * sum(head_cost(layer, h, keys, len(need[li])) for h in layer.heads)
            u = N * len(need[li])
    return total


def forward_float(spec: NetworkSpec, ds: Dataset, fmt: FloatFormat,
                  progress: Progress | None = None) -> list[list[tuple[Any, ...]]]:
    """Outputs ``[sequence][read position] -> vector`` of mpfr values, computed in ``fmt``.
    ``progress("forward", done, total)`` is called as it advances, counting rounded
    operations (per slice of columns of each map, per sequence of each head)."""
    if spec.extended():
        raise SpecError("the float-order emulation covers Kajitsuka & Sato's model only: "
                        "this network has positional embeddings, attention biases, score "
                        "scales or a causal mask")
    count = {"done": 0, "total": 0}

    def tick(k: int) -> None:
        count["done"] += k
        if progress is not None:
            progress("forward", count["done"], max(count["total"], count["done"]))

    ctx = fmt.context()
    with gmpy2.context(ctx):
        rw = _Rounded(ctx)
        need = needed_positions(spec)
        if spec.input_kind != ds.inputs or spec.seq_len != ds.n:
            raise SpecError(f"the network reads {spec.input_kind} of length {spec.seq_len}, "
                            f"the dataset has {ds.inputs} of length {ds.n}")
        start = 0
        if ds.inputs == "token-ids":
            emb = spec.layers[0]
            assert isinstance(emb, Embedding)
            st = FloatState(rw.dense(emb.table), np.array(ds.sequences, dtype=np.int64))
            start = 1
        else:
            toks, index = token_index(ds)
            cols = np.empty((spec.input_dim, len(toks)), dtype=object)
            for c, tok in enumerate(toks):
                for r, x in enumerate(tok):
                    cols[r, c] = to_mpfr(x, ctx)
            st = FloatState(cols, index)
        count["total"] = _units(spec, need, start, st.cols.shape[1], ds.N)
        tick(0)
        for li in range(start, len(spec.layers)):
            layer = spec.layers[li]
            if isinstance(layer, Linear):
                st = FloatState(_affine(layer.map, st.cols, rw), st.index)
                tick(map_cost(layer.map) * st.cols.shape[1])
            elif isinstance(layer, FeedForward):
                st = FloatState(_feedforward(layer, st.cols, rw, tick), st.index)
            elif isinstance(layer, Attention):
                st = _attention(layer, st, need[li], rw, tick)
                count["total"] = count["done"] + _units(spec, need, li + 1, st.cols.shape[1],
                                                        ds.N)
            else:
                raise SpecError(f"layer {li}: an embedding may only be the first layer")
        pos = spec.read_positions()
        return [[tuple(st.cols[:, st.index[i, k]].tolist()) for k in pos]
                for i in range(ds.N)]


def exact_values(outputs: list[list[tuple[Any, ...]]]) -> list[list[tuple[Fraction | None, ...]]]:
    """mpfr outputs as exact dyadic rationals (``None`` for infinities and NaN)."""
    return [[tuple(mpfr_to_fraction(v) for v in vec) for vec in row] for row in outputs]
