"""The exact forward pass of a :class:`NetworkSpec` over a whole dataset.

Activations are integer matrices over one shared denominator.  Work is done
on the *distinct* token columns only: every position holds an index into a table of unique
columns, so token-wise layers cost ``O(#distinct columns)``, not ``O(N n)``.  Integer
arithmetic runs in numpy ``int64`` when a bound proves it cannot overflow, and on Python
integers (numpy ``object`` arrays) otherwise.  No float is ever involved.

The int64 bound: every int64 operation is preceded by a check on the magnitudes of its
operands, with ``2^62`` as the limit (so a sum of two checked values cannot reach ``2^63``):
a product ``W x`` needs ``max|W| max|x| cols < 2^62``, a scaling ``max|a| c < 2^62``, a sum
``max|a| + max|b| < 2^62``, a feed-forward row ``|b| + sum_j |w_j| max|x_j| < 2^62``, the sum
of the values over ``K`` keys ``max|v| K < 2^62``, and the heads' common denominator
``max|v| (lcm / d) < 2^62``; when a check fails the operation runs on Python integers.
Networks whose values are bounded integers (the float-exact constructions: everything
below ``2^24``) thus run entirely in int64, attention, column deduplication (a numpy sort
of the columns) included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.errors import NeedsRigorousSoftmaxError, SpecError
from exactmem.model import piecewise
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
from exactmem.model.univariate import sweep_eval

_INT64_SAFE = 1 << 62
SWEEP_MIN_HIDDEN = 32

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as the forward pass advances (see
:func:`exactmem.progress.hook`)."""
Tick = Callable[[], None]


def _no_tick() -> None:
    return None


@dataclass(slots=True)
class State:
    """Activations: ``cols[:, index[i, k]] / den`` is the vector at sequence i, position k."""

    cols: np.ndarray  # (dim, u), int64 or object
    den: int
    index: np.ndarray  # (N, n) int64; -1 where a position is no longer needed


def _maxabs(a: np.ndarray) -> int:
    if a.size == 0:
        return 0
    return int(max(abs(int(a.max())), abs(int(a.min()))))


def _as_array(m: ScaledMatrix) -> np.ndarray:
    big = any(abs(x) >= _INT64_SAFE for row in m.num for x in row)
    return np.array(m.num, dtype=object if big else np.int64).reshape(m.shape)


def _to_object(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == object else a.astype(object)


def _matmul(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Exact integer product; int64 only when the bound excludes overflow."""
    if w.dtype != object and x.dtype != object:
        bound = _maxabs(w) * _maxabs(x) * max(w.shape[1], 1)
        if bound < _INT64_SAFE:
            return w @ x
    return _to_object(w).dot(_to_object(x))


def _scale(a: np.ndarray, factor: int) -> np.ndarray:
    if factor == 1:
        return a
    if a.dtype != object and _maxabs(a) * factor < _INT64_SAFE:
        return a * factor
    return _to_object(a) * factor


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype != object and b.dtype != object and _maxabs(a) + _maxabs(b) < _INT64_SAFE:
        return a + b
    return _to_object(a) + _to_object(b)


def _normalize(a: np.ndarray, den: int) -> tuple[np.ndarray, int]:
    """Divide numerators and denominator by their gcd; shrink object arrays back to int64."""
    if a.size and not a.any():  # all zero: any denominator will do, and 1 keeps it small
        return a.astype(np.int64), 1
    if a.size:
        if a.dtype == object:
            g = reduce(math.gcd, (int(v) for v in a.flat), den)
        else:
            g = math.gcd(int(np.gcd.reduce(a, axis=None)), den)
        if g > 1:
            a = a // g
            den //= g
    if a.dtype == object and _maxabs(a) < _INT64_SAFE:
        a = a.astype(np.int64)
    return a, den


def apply_affine(aff: Affine, cols: np.ndarray, den: int) -> tuple[np.ndarray, int]:
    """``W x + b`` on every column, exactly."""
    w = _as_array(aff.weight)
    out = _matmul(w, cols)
    out_den = aff.weight.den * den
    if aff.bias is not None:
        b = _as_array(aff.bias)
        lcm = out_den * aff.bias.den // math.gcd(out_den, aff.bias.den)
        out = _add(_scale(out, lcm // out_den), _scale(b, lcm // aff.bias.den))
        out_den = lcm
    return _normalize(out, out_den)


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0) if a.dtype != object else np.where(a > 0, a, 0).astype(object)


Terms = list[tuple[int, int]]


def _grouped(aff: Affine, fw: int, fb: int) -> list[tuple[list[tuple[int, Terms]], int]]:
    """Per output row: terms grouped by ``|weight * fw|`` as ``(|w|, [(sign, input)])``, and
    the scaled bias.  Summing equal-magnitude inputs first multiplies each weight once."""
    bias = aff.bias.num if aff.bias is not None else None
    rows = []
    for i, row in enumerate(aff.weight.num):
        groups: dict[int, list[tuple[int, int]]] = {}
        for j, w in enumerate(row):
            if w:
                groups.setdefault(abs(w) * fw, []).append((1 if w > 0 else -1, j))
        b = bias[i][0] * fb if bias is not None else 0
        rows.append((sorted(groups.items()), b))
    return rows


def _fit(a: np.ndarray) -> tuple[np.ndarray, int]:
    """``(array, bound)``: int64 with its max |entry| when it fits, else object with -1."""
    if a.dtype != object:
        return a, _maxabs(a)
    try:
        small = a.astype(np.int64)
    except OverflowError:
        return a, -1
    bound = _maxabs(small)
    return (small, bound) if bound < _INT64_SAFE else (a, -1)


def _affine_rows(aff: Affine, rows: list[tuple[np.ndarray, int]], den: int,
                 ) -> tuple[list[tuple[np.ndarray, int]], int]:
    """``W x + b`` on row arrays (each int64 with a bound, or object); exact, sparse."""
    out_den = aff.weight.den * den
    bden = aff.bias.den if aff.bias is not None else 1
    out_den = out_den * bden // math.gcd(out_den, bden)
    fw, fb = out_den // (aff.weight.den * den), out_den // bden
    size = rows[0][0].shape[0] if rows else 0
    objs: dict[int, np.ndarray] = {}

    def obj(j: int) -> np.ndarray:
        if j not in objs:
            objs[j] = _to_object(rows[j][0])
        return objs[j]

    result: list[tuple[np.ndarray, int]] = []
    cache: dict[tuple[bool, int, tuple[tuple[int, int], ...]], np.ndarray] = {}
    for groups, b in _grouped(aff, fw, fb):
        bound = abs(b)
        for w, terms in groups:
            for _, j in terms:
                rb = rows[j][1]
                bound = -1 if rb < 0 or bound < 0 else bound + w * rb
        small = 0 <= bound < _INT64_SAFE
        acc: np.ndarray | None = None
        for w, terms in groups:
            key = (small, w, tuple(terms))
            part = cache.get(key)
            if part is None:
                for sign, j in terms:
                    x = rows[j][0] if small else obj(j)
                    if part is None:
                        part = x if sign > 0 else -x
                    else:
                        part = part + x if sign > 0 else part - x
                assert part is not None
                if w != 1:
                    part = part * w
                if len(terms) > 1 or w != 1:
                    cache[key] = part
            acc = part if acc is None else acc + part
        if acc is None:
            acc = np.zeros(size, dtype=np.int64 if small else object)
        if b:
            acc = acc + b
        result.append((acc, bound) if small else _fit(acc))
    return result, out_den


def _rows_normalize(rows: list[tuple[np.ndarray, int]], den: int,
                    ) -> tuple[list[tuple[np.ndarray, int]], int]:
    g = den
    for a, _ in rows:
        if g == 1:
            return rows, den
        if a.size:
            if a.dtype == object:
                g = reduce(math.gcd, (int(v) for v in a), g)
            else:
                g = math.gcd(int(np.gcd.reduce(a)), g)
    if g == 1:
        return rows, den
    return [_fit(a // g) for a, _ in rows], den // g


def dense_feedforward(ff: FeedForward, cols: np.ndarray, den: int, tick: Tick = _no_tick,
                      ) -> tuple[np.ndarray, int]:
    """The ReLU network row by row: sparse weights, int64 rows where a bound allows it,
    Python integers (object rows) otherwise.  Same exact values as the layer-wise matmul.
    ``tick()`` is called after each affine map."""
    den = int(den)
    rows = [_fit(cols[i]) for i in range(cols.shape[0])]
    keep = [False] * len(rows)  # non-negative combinations of ReLU outputs: ReLU is a no-op
    for i, aff in enumerate(ff.layers):
        if i > 0:
            rows = [(a, bnd) if k else (np.maximum(a, 0), bnd) if a.dtype != object
                    else (np.where(a > 0, a, 0).astype(object), bnd)
                    for (a, bnd), k in zip(rows, keep, strict=True)]
        bias = aff.bias.num if aff.bias is not None else None
        keep = [i > 0 and (bias is None or bias[r][0] >= 0) and all(x >= 0 for x in row)
                for r, row in enumerate(aff.weight.num)]
        new_rows, new_den = _affine_rows(aff, rows, den)
        if new_den != den:
            new_rows, new_den = _rows_normalize(new_rows, new_den)
        rows, den = new_rows, new_den
        tick()
    if all(a.dtype != object for a, _ in rows):
        out = np.stack([a for a, _ in rows]) if rows else np.zeros((0, cols.shape[1]), np.int64)
    else:
        out = np.empty((len(rows), cols.shape[1]), dtype=object)
        for i, (a, _) in enumerate(rows):
            out[i] = a
    return _normalize(out, den)


def _scalar_feedforward(ff: FeedForward, cols: np.ndarray, den: int, tick: Tick,
                        ) -> tuple[np.ndarray, int]:
    """A block that reads one scalar (its input, or the one output of its first map),
    evaluated piece by piece (:mod:`exactmem.model.piecewise`)."""
    maps, relu_first = ff.layers, False
    if ff.in_dim != 1:
        cols, den = apply_affine(maps[0], cols, den)
        maps, relu_first = maps[1:], True
        tick()
    out, out_den = piecewise.evaluate(maps, cols[0], int(den), relu_first, tick)
    return _normalize(out, out_den)


def apply_feedforward(ff: FeedForward, cols: np.ndarray, den: int, tick: Tick = _no_tick,
                      ) -> tuple[np.ndarray, int]:
    """Token-wise ReLU network (eq. 3); a wide scalar-input block is evaluated by sweep, a
    deeper block that reads one scalar piece by piece.
    ``tick()`` is called once per affine map."""
    if len(ff.layers) == 2 and ff.in_dim == 1 and ff.layers[0].out_dim >= SWEEP_MIN_HIDDEN:
        rows, out_den = sweep_eval(ff.layers[0], ff.layers[1], [int(v) for v in cols[0]], den)
        out = np.array(rows, dtype=object).reshape(len(rows), cols.shape[1])
        out, out_den = _normalize(out, out_den)
        tick()
        tick()
    elif len(ff.layers) > 1 and (ff.in_dim == 1 or ff.layers[0].out_dim == 1):
        out, out_den = _scalar_feedforward(ff, cols, den, tick)
    else:
        out, out_den = dense_feedforward(ff, cols, den, tick)
    if ff.residual:
        lcm = out_den * den // math.gcd(out_den, den)
        out, out_den = _normalize(_add(_scale(out, lcm // out_den), _scale(cols, lcm // den)), lcm)
    return out, out_den


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
    """For each layer, the positions whose outputs later layers or the readout use."""
    need = list(spec.read_positions())
    out: list[list[int]] = [[] for _ in spec.layers]
    for i in range(len(spec.layers) - 1, -1, -1):
        out[i] = need
        if isinstance(spec.layers[i], Attention):
            need = list(range(spec.seq_len))
    return out


def work_units(spec: NetworkSpec) -> int:
    """Units of progress of a forward pass: one per affine map of a feed-forward block, per
    attention head, per linear layer."""
    total = 0
    for layer in spec.layers:
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


def forward(spec: NetworkSpec, ds: Dataset, progress: Progress | None = None) -> State:
    """Run the network on every sequence exactly; the state holds the final outputs.
    ``progress("forward", done, total)`` is called per affine map and per head."""
    state, start = initial_state(spec, ds)
    need = needed_positions(spec)
    tick = ticker(progress, "forward", work_units(spec))
    for i in range(start, len(spec.layers)):
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
