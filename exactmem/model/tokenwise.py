"""Token-wise layers of the exact forward pass: the activation state (integer columns over
one shared denominator), integer array arithmetic, affine maps and feed-forward blocks
(:mod:`exactmem.model.forward` drives them, with attention, over a dataset).

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
from functools import reduce

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.model import piecewise
from exactmem.model.spec import (
    Affine,
    FeedForward,
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
