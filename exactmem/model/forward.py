"""The exact forward pass of a :class:`NetworkSpec` over a whole dataset.

Activations are integer matrices over one shared denominator.  Work is done
on the *distinct* token columns only: every position holds an index into a table of unique
columns, so token-wise layers cost ``O(#distinct columns)``, not ``O(N n)``.  Integer
arithmetic runs in numpy ``int64`` when a bound proves it cannot overflow, and on Python
integers (numpy ``object`` arrays) otherwise.  No float is ever involved.

The token-wise layers (state, integer arithmetic with its int64 bound, affine maps,
feed-forward blocks) are in :mod:`exactmem.model.tokenwise`; here: column deduplication,
attention, and the pass over the layers.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import reduce
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.errors import NeedsRigorousSoftmaxError, SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
)
from exactmem.model.tokenwise import (  # noqa: F401 (re-exported: forward is where callers look)
    _INT64_SAFE,
    Progress,
    State,
    Tick,
    _add,
    _as_array,
    _maxabs,
    _no_tick,
    _normalize,
    _scale,
    _to_object,
    apply_affine,
    apply_feedforward,
    dense_feedforward,
)


def _pack_rows(a: np.ndarray) -> np.ndarray:
    """The rows of an int64 matrix packed into fewer int64 rows, column order preserved:
    consecutive rows ``r`` with values in ``[lo_r, hi_r]`` become one row ``sum_r (a_r - lo_r)
    prod_{s < r} (hi_s - lo_s + 1)`` while that product stays below ``2^62`` (a bijection on
    the columns, so equal packed columns are equal columns); constant rows are dropped."""
    if a.shape[1] == 0:
        return a
    lo, hi = a.min(axis=1), a.max(axis=1)
    packed: list[np.ndarray] = []
    key: np.ndarray | None = None
    span = 1
    for r in range(a.shape[0]):
        width = int(hi[r]) - int(lo[r]) + 1
        if width == 1:
            continue
        if key is None or span * width >= _INT64_SAFE:
            if key is not None:
                packed.append(key)
            key, span = a[r] - lo[r], width
        else:
            key = key + (a[r] - lo[r]) * span
            span *= width
    if key is not None:
        packed.append(key)
    return np.stack(packed) if packed else np.zeros((1, a.shape[1]), dtype=np.int64)


def dedupe_columns(cols: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep one copy of each distinct column; remap ``index`` (``-1`` stays ``-1``)."""
    seen = np.zeros(cols.shape[1], dtype=bool)
    seen[index[index >= 0]] = True
    used = np.flatnonzero(seen)  # the used columns, ascending (as np.unique would give)
    remap = np.full(cols.shape[1], -1, dtype=np.int64)
    if cols.dtype != object and used.size and cols.shape[0]:
        # machine integers: one stable lexicographic sort of the columns (numpy); equal
        # neighbours form a group, numbered by first appearance as in the loop below
        sub = _pack_rows(cols[:, used])
        order = np.lexsort(sub[::-1])
        ordered = sub[:, order]
        new = np.ones(order.size, dtype=bool)
        new[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
        group = np.cumsum(new) - 1
        first = order[new]  # stable sort: a group's first member comes first
        by_first = np.argsort(first, kind="stable")
        rank = np.empty_like(by_first)
        rank[by_first] = np.arange(by_first.size)
        inv = np.empty_like(order)
        inv[order] = group
        remap[used] = rank[inv]
        new_index = np.where(index >= 0, remap[np.maximum(index, 0)], -1)
        return cols[:, used[first[by_first]]], new_index
    table: dict[tuple[Any, ...], int] = {}
    keep: list[int] = []
    for c in used.tolist():
        key = tuple(cols[:, c].tolist())
        j = table.get(key)
        if j is None:
            j = table[key] = len(keep)
            keep.append(c)
        remap[c] = j
    new_index = np.where(index >= 0, remap[np.maximum(index, 0)], -1)
    return cols[:, keep], new_index


def _lcm_range(counts: np.ndarray) -> int:
    return reduce(lambda a, b: a * b // math.gcd(a, b), {int(c) for c in counts.flat}, 1)


def query_groups(att: Attention, n: int, queries: list[int]) -> list[tuple[list[int], list[int]]]:
    """``(keys, query slots)`` groups: the queries (by their slot in ``queries``) that
    attend to the same key positions (one group unless the layer is causal)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for slot, q in enumerate(queries):
        groups.setdefault(tuple(att.keys_of(n, q)), []).append(slot)
    return [(list(k), v) for k, v in groups.items()]


def _head_values(head: Head, state: State, keys: list[int], queries: list[int],
                 kind: str) -> tuple[np.ndarray, int]:
    """``W_O W_V Z a_.j`` for the given keys and queries: ``(m, N, P)`` over a denominator."""
    cols, den = state.cols, state.den
    ov = head.output.matmul(head.value)  # m x m
    vals, vden = apply_affine(Affine(ov), cols, den)  # W_O W_V z on unique columns
    kv = vals[:, state.index[:, keys]]  # (m, N, K)
    if kv.dtype != object and _maxabs(vals) * max(len(keys), 1) >= _INT64_SAFE:
        kv = _to_object(kv)  # a sum over the keys could leave int64
    if kind == "uniform" or head.scores_are_zero():
        s = kv.sum(axis=2)  # (m, N): same for every query
        return np.repeat(s[:, :, None], len(queries), axis=2), vden * len(keys)
    kmat, _ = apply_affine(Affine(head.key, head.key_bias), cols, den)
    qmat, _ = apply_affine(Affine(head.query, head.query_bias), cols, den)
    kk = _to_object(kmat[:, state.index[:, keys]])  # (s, N, K)
    qq = _to_object(qmat[:, state.index[:, queries]])  # (s, N, P)
    scores = (kk[:, :, :, None] * qq[:, :, None, :]).sum(axis=0)  # (N, K, P); scale > 0
    best = scores.max(axis=1)
    mask = scores == best[:, None, :]  # tie set I_j (eq. 1)
    counts = mask.sum(axis=1)  # (N, P)
    lcm = _lcm_range(counts)
    weights = np.where(mask, (lcm // counts)[:, None, :], 0)  # lcm / |I_j| on ties
    return (_to_object(kv)[:, :, :, None] * weights[None, :, :, :]).sum(axis=2), vden * lcm


def apply_attention(att: Attention, state: State, queries: list[int], tick: Tick = _no_tick,
                    ) -> State:
    """Column-wise attention (eq. 2) at the query positions ``queries``; exact for
    hardmax and for zero-score (uniform) heads; softmax with scores raises.  A causal layer
    gives each query its own keys; the value/output biases add ``W_O b_V + b_O`` (the
    weights sum to 1); a positive score scale changes no hardmax comparison.  ``tick()`` is
    called once per head."""
    n = state.index.shape[1]
    groups = query_groups(att, n, queries)
    needed = sorted({p for keys, _ in groups for p in keys})
    if (state.index[:, needed] < 0).any() or (state.index[:, queries] < 0).any():
        raise SpecError("attention needs positions that an earlier stage dropped")
    N = state.index.shape[0]
    total: np.ndarray | None = None
    total_den = 1
    for h, head in enumerate(att.heads):
        if att.kind == "softmax" and not head.scores_are_zero():
            raise NeedsRigorousSoftmaxError(
                f"head {h}: softmax attention with non-zero scores has irrational weights; "
                "it needs the rigorous softmax evaluation (interval bounds), not the exact pass")
        parts = [(slots, *_head_values(head, state, keys, [queries[s] for s in slots],
                                       att.kind)) for keys, slots in groups]
        out_den = reduce(lambda a, b: a * b // math.gcd(a, b), (d for _, _, d in parts), 1)
        small = all(v.dtype != object and _maxabs(v) * (out_den // d) < _INT64_SAFE
                    for _, v, d in parts)
        out = np.empty((head.output.shape[0], N, len(queries)),
                       dtype=np.int64 if small else object)
        for slots, vals, d in parts:
            out[:, :, slots] = (vals if small else _to_object(vals)) * (out_den // d)
        shift = head.constant()
        if shift is not None:
            lcm = out_den * shift.den // math.gcd(out_den, shift.den)
            out = out * (lcm // out_den) + _as_array(shift).astype(object)[:, :, None] * (
                lcm // shift.den)
            out_den = lcm
        out, out_den = _normalize(out, out_den)
        if total is None:
            total, total_den = out, out_den
        else:
            lcm2 = total_den * out_den // math.gcd(total_den, out_den)
            total = _add(_scale(total, lcm2 // total_den), _scale(out, lcm2 // out_den))
            total_den = lcm2
        tick()
    assert total is not None
    cols, den = state.cols, state.den
    if att.residual:
        base = cols[:, state.index[:, queries]]
        lcm = total_den * den // math.gcd(total_den, den)
        total = _add(_scale(total, lcm // total_den), _scale(base, lcm // den))
        total_den = lcm
    m = total.shape[0]
    flat = total.reshape(m, N * len(queries))
    index = np.full(state.index.shape, -1, dtype=np.int64)
    index[:, queries] = np.arange(N * len(queries), dtype=np.int64).reshape(N, len(queries))
    flat, total_den = _normalize(flat, total_den)
    new_cols, new_index = dedupe_columns(flat, index)
    return State(new_cols, total_den, new_index)


def token_index(ds: Dataset) -> tuple[list[Any], np.ndarray]:
    """Distinct tokens in first-appearance order, and each position's index among them."""
    table: dict[Any, int] = {}
    index = np.empty((ds.N, ds.n), dtype=np.int64)
    for i, seq in enumerate(ds.sequences):
        for k, tok in enumerate(seq):
            index[i, k] = table.setdefault(tok, len(table))
    return list(table), index


def _positioned(emb: Embedding, ids: np.ndarray) -> State:
    """Columns ``table[:, t] + positions[:, k]`` for every (token, position) pair that
    occurs; ``ids`` holds the token ids."""
    assert emb.positions is not None
    den = emb.table.den * emb.positions.den // math.gcd(emb.table.den, emb.positions.den)
    table = _to_object(_as_array(emb.table)) * (den // emb.table.den)
    pos = _to_object(_as_array(emb.positions)) * (den // emb.positions.den)
    n = ids.shape[1]
    pairs = ids * n + np.arange(n, dtype=np.int64)[None, :]
    used, index = np.unique(pairs, return_inverse=True)
    cols = table[:, used // n] + pos[:, used % n]
    cols, den = _normalize(cols, den)
    return State(cols, den, index.reshape(ids.shape).astype(np.int64))


def initial_state(spec: NetworkSpec, ds: Dataset) -> tuple[State, int]:
    """The input as a table of distinct tokens; token ids are embedded by the first layer."""
    if spec.input_kind != ds.inputs:
        raise SpecError(f"the network reads {spec.input_kind}, the dataset has {ds.inputs}")
    if ds.n != spec.seq_len:
        raise SpecError(f"the network was built for n = {spec.seq_len}, the dataset has n = {ds.n}")
    if ds.inputs == "token-ids":
        if ds.vocab_size is not None and ds.vocab_size > spec.input_dim:
            raise SpecError(f"the network embeds {spec.input_dim} token ids, the dataset's "
                            f"vocabulary has {ds.vocab_size}")
        emb = spec.layers[0]
        assert isinstance(emb, Embedding)
        index = np.array(ds.sequences, dtype=np.int64).reshape(ds.N, ds.n)
        if emb.positions is None:
            return State(_as_array(emb.table), emb.table.den, index), 1
        return _positioned(emb, index), 1
    if ds.dim != spec.input_dim:
        raise SpecError(f"the network reads tokens of dimension {spec.input_dim}, the dataset "
                        f"has {ds.dim}")
    toks, index = token_index(ds)
    m = ScaledMatrix.from_rows(list(zip(*toks, strict=True)), cols=len(toks))
    return State(_as_array(m), m.den, index), 0


def needed_positions(spec: NetworkSpec) -> list[list[int]]:
    """For each layer, the positions whose outputs later layers or the readout use: before
    an attention layer, the positions needed after it and their keys (a query reads its own
    column and its keys only)."""
    need = sorted(set(spec.read_positions()))
    out: list[list[int]] = [[] for _ in spec.layers]
    for i in range(len(spec.layers) - 1, -1, -1):
        out[i] = need
        layer = spec.layers[i]
        if isinstance(layer, Attention):
            wider = set(need)
            for q in need:
                wider.update(layer.keys_of(spec.seq_len, q))
            need = sorted(wider)
    return out


def work_units(spec: NetworkSpec, layers: range | None = None) -> int:
    """Units of progress of a forward pass (of ``spec.layers[i]``, ``i`` in ``layers``): one
    per affine map of a feed-forward block, per attention head, per linear layer."""
    total = 0
    for i in layers if layers is not None else range(len(spec.layers)):
        layer = spec.layers[i]
        if isinstance(layer, FeedForward):
            total += len(layer.layers)
        elif isinstance(layer, Attention):
            total += len(layer.heads)
        elif isinstance(layer, Linear):
            total += 1
    return total


def ticker(progress: Progress | None, stage: str, total: int) -> Tick:
    """A ``tick()`` that counts units and reports ``(stage, done, total)`` to ``progress``."""
    if progress is None:
        return _no_tick
    count = [0]
    report = progress

    def tick() -> None:
        count[0] += 1
        report(stage, count[0], total)

    report(stage, 0, total)
    return tick


def run_layers(spec: NetworkSpec, state: State, layers: range, tick: Tick = _no_tick,
               ) -> State:
    """Run ``spec.layers[i]`` for ``i`` in ``layers`` on ``state``, exactly."""
    need = needed_positions(spec)
    for i in layers:
        layer = spec.layers[i]
        if isinstance(layer, Linear):
            cols, den = apply_affine(layer.map, state.cols, state.den)
            state = State(cols, den, state.index)
            tick()
        elif isinstance(layer, FeedForward):
            cols, den = apply_feedforward(layer, state.cols, state.den, tick)
            state = State(cols, den, state.index)
        elif isinstance(layer, Attention):
            state = apply_attention(layer, state, need[i], tick)
        else:
            raise SpecError(f"layer {i}: an embedding may only be the first layer")
    return state


def forward(spec: NetworkSpec, ds: Dataset, progress: Progress | None = None) -> State:
    """Run the network on every sequence exactly; the state holds the final outputs.
    ``progress("forward", done, total)`` is called per affine map and per head.  (In
    bounded memory, a slice of the sequences at a time: :mod:`exactmem.model.sliced`.)"""
    state, start = initial_state(spec, ds)
    tick = ticker(progress, "forward", work_units(spec))
    return run_layers(spec, state, range(start, len(spec.layers)), tick)


def outputs(spec: NetworkSpec, state: State) -> list[list[tuple[Fraction, ...]]]:
    """Exact output vectors: ``[sequence][read position] -> vector``."""
    pos = spec.read_positions()
    res = []
    for i in range(state.index.shape[0]):
        row = []
        for k in pos:
            col = state.cols[:, state.index[i, k]]
            row.append(tuple(Fraction(int(v), state.den) for v in col))
        res.append(row)
    return res
