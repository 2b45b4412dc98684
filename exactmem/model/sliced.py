"""The exact forward pass in bounded memory: a slice of the sequences at a time, without
walking the deep token-wise tail once per slice.

Every sequence is evaluated on its own, so the layers up to the last attention layer (the
*head*) run on at most ``size`` sequences at a time; their states are joined (one table of
distinct columns over one denominator); the token-wise layers after the last attention
layer (the *tail*) then run once on that table.  After the last attention layer only the
read positions are left, so the joined state holds about ``N x read positions`` columns of
the network's width; the attention layers' intermediate arrays (values per key, scores per
key and query), which grow with the sequences and the positions held, stay bounded by the
slice.  In the tail, a deep block that reads one scalar (evaluated piece by piece, at a
cost that grows with its pieces more than with its points) runs once on all columns; every
other token-wise layer runs on ``size x read positions`` columns at a time (its row arrays
of Python integers would otherwise grow with N), the blocks joined over one denominator.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from exactmem.model.dataset import Dataset
from exactmem.model.forward import (
    Progress,
    State,
    Tick,
    dedupe_columns,
    initial_state,
    run_layers,
    ticker,
    work_units,
)
from exactmem.model.spec import Attention, FeedForward, NetworkSpec
from exactmem.model.tokenwise import _no_tick, _scale, _to_object


def tail_start(spec: NetworkSpec) -> int:
    """The index of the first layer after the last attention layer (0 when there is none)."""
    last = [i for i, layer in enumerate(spec.layers) if isinstance(layer, Attention)]
    return last[-1] + 1 if last else 0


def join_states(parts: list[State]) -> State:
    """One state from the states of consecutive slices of the sequences: the columns over the
    least common denominator (each part is in lowest terms, so the join is too), the
    indices shifted, equal columns kept once (numbered by first appearance, as one pass
    over all sequences numbers them)."""
    den = reduce(lambda a, b: a * b // math.gcd(a, b), (p.den for p in parts), 1)
    scaled = [_scale(p.cols, den // p.den) for p in parts]
    if any(c.dtype == object for c in scaled):
        scaled = [_to_object(c) for c in scaled]
    offsets = np.cumsum([0] + [c.shape[1] for c in scaled[:-1]])
    index = np.concatenate([np.where(p.index >= 0, p.index + off, -1)
                            for p, off in zip(parts, offsets, strict=True)])
    cols, index = dedupe_columns(np.concatenate(scaled, axis=1), index)
    return State(cols, den, index)


def piecewise_block(layer: object) -> bool:
    """A block evaluated piece by piece (it reads one scalar): its cost hardly grows with
    the columns, so it runs once on all of them."""
    return isinstance(layer, FeedForward) and len(layer.layers) > 1 and (
        layer.in_dim == 1 or layer.layers[0].out_dim == 1)


def _join_columns(parts: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, int]:
    """Consecutive column blocks, each in lowest terms, over their least common denominator."""
    den = reduce(lambda a, b: a * b // math.gcd(a, b), (d for _, d in parts), 1)
    scaled = [_scale(c, den // d) for c, d in parts]
    if any(c.dtype == object for c in scaled):
        scaled = [_to_object(c) for c in scaled]
    return np.concatenate(scaled, axis=1), den


def run_tail(spec: NetworkSpec, state: State, layers: range, width: int, tick: Tick,
             ) -> State:
    """The token-wise ``layers`` on ``state``: piecewise blocks on all columns at once, the
    others ``width`` columns at a time."""
    for i in layers:
        u = state.cols.shape[1]
        if piecewise_block(spec.layers[i]) or u <= width:
            state = run_layers(spec, state, range(i, i + 1), tick)
            continue
        parts = []
        for k, lo in enumerate(range(0, u, width)):
            block = State(state.cols[:, lo:lo + width], state.den, state.index[:0])
            out = run_layers(spec, block, range(i, i + 1), tick if k == 0 else _no_tick)
            parts.append((out.cols, out.den))
        cols, den = _join_columns(parts)
        state = State(cols, den, state.index)
    return state


def forward_sliced(spec: NetworkSpec, ds: Dataset, progress: Progress | None = None,
                   size: int = 8192) -> State:
    """:func:`exactmem.model.forward.forward`, the head at most ``size`` sequences at a
    time and the tail once on the joined state (the same exact state).
    ``progress("forward", done, total)`` is called per affine map and head of each slice."""
    _, start = initial_state(spec, ds.slice(0, min(ds.N, 1)))
    split = max(tail_start(spec), start)
    starts = list(range(0, ds.N, size)) or [0]
    head, tail = range(start, split), range(split, len(spec.layers))
    tick = ticker(progress, "forward",
                  work_units(spec, head) * len(starts) + work_units(spec, tail))
    parts = []
    for lo in starts:
        state, _ = initial_state(spec, ds.slice(lo, lo + size) if len(starts) > 1 else ds)
        parts.append(run_layers(spec, state, head, tick))
    state = parts[0] if len(parts) == 1 else join_states(parts)
    return run_tail(spec, state, tail, size * max(len(spec.read_positions()), 1), tick)
