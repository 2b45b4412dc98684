"""The exact forward pass over a slice of sequences, a bounded number at a time, and the
float-exact claims on the same slice (standard library only).

When a float-exact claim holds, its pass (floatexact.py) has computed every needed value as an
exact rational of the same function in the float mirror's order; those values are the
outputs, and the exact pass (net_forward.py) runs only when no claim holds.
"""

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from . import floatexact
from . import net_forward as forward
from .cert_dataset import initial
from .net_forward import Col, Index, State, Tick
from .parse import Layer, lcm

Progress = Callable[[str, int, int], None]  # progress(stage, done, total)
Outputs = list[list[tuple[Fraction, ...]]]  # [sequence][read position] -> the output vector


def work_units(layers: Sequence[Layer], sequences: int, passes: int = 1) -> int:
    """Units of progress: one per output row of a feed-forward map and pass (slice of
    sequences), one per head and sequence of an attention layer."""
    total = 0
    for la in layers:
        if la["type"] == "feedforward":
            total += sum(len(w[0]) for w, _ in la["maps"]) * passes
        elif la["type"] == "attention":
            total += len(la["heads"]) * sequences
    return total


class Ticker:
    """Counts units of work and forwards ``(stage, done, total)`` to a progress callback."""

    def __init__(self, progress: Progress | None, stage: str, total: int) -> None:
        self.progress, self.stage, self.total, self.done = progress, stage, total, 0

    def __call__(self, k: int = 1) -> None:
        self.done += k
        if self.progress is not None:
            self.progress(self.stage, self.done, self.total)


CHUNK = 8192  # sequences an attention layer (or a float-exact pass) holds at once


def outputs(state: State, read: Sequence[int]) -> Outputs:
    """``[sequence][read position] -> tuple of Fractions`` of a final state."""
    cols, den, index = state
    memo: dict[int, tuple[Fraction, ...]] = {}  # per column: many positions share one
    for seq in index:
        for p in read:
            c = seq[p]
            if c not in memo:
                memo[c] = tuple(Fraction(x, den) for x in cols[c])
    return [[memo[seq[p]] for p in read] for seq in index]


def join(parts: Sequence[State]) -> State:
    """One state from the states of consecutive slices of the sequences: the columns over the
    least common denominator (each part is in lowest terms, so the join is too), equal
    columns kept once, numbered by first appearance (as one pass over all sequences)."""
    den = 1
    for _, d, _ in parts:
        den = lcm(den, d)
    table: dict[Col, int] = {}
    cols: list[Col] = []
    index: Index = []
    for part_cols, d, part_index in parts:
        f = den // d
        slot = []
        for c in part_cols:
            if f != 1:
                c = tuple(x * f for x in c)
            j = table.get(c)
            if j is None:
                j = table[c] = len(cols)
                cols.append(c)
            slot.append(j)
        index += [[slot[j] if j >= 0 else -1 for j in seq] for seq in part_index]
    return cols, den, index


def _layers(layers: Sequence[Layer], lo: int, hi: int, cols: list[Col], den: int, index: Index,
            needs: Sequence[list[int]], tick: Tick) -> State:
    """Run ``layers[lo:hi]`` on a state."""
    for i in range(lo, hi):
        la = layers[i]
        if la["type"] == "feedforward":
            cols, den = forward.feedforward(la, cols, den, tick)
        else:
            cols, den, index = forward.attention(la, cols, den, index, needs[i], tick=tick)
    return cols, den, index


def piecewise_block(layer: Layer) -> bool:
    """A block the pass evaluates piece by piece (it reads one scalar: one input with
    non-zero weights, or one output row of its first map): run once on all columns."""
    maps = layer["maps"]
    rows = maps[0][0][0]
    support = {j for r in rows for j, x in enumerate(r) if x}
    return len(maps) > 1 and (len(support) <= 1 or len(rows) == 1)


def _tail(layers: Sequence[Layer], lo: int, hi: int, cols: list[Col], den: int, tick: Tick,
          width: int) -> tuple[list[Col], int]:
    """The token-wise ``layers[lo:hi]``: piecewise blocks on all columns at once, the others
    ``width`` columns at a time (their row lists would grow with N), the blocks joined over
    their least common denominator (each block is in lowest terms, so the join is too)."""
    for i in range(lo, hi):
        if piecewise_block(layers[i]) or len(cols) <= width:
            cols, den = forward.feedforward(layers[i], cols, den, tick)
            continue
        parts = [forward.feedforward(layers[i], cols[c:c + width], den,
                                     tick if c == 0 else forward.no_tick)
                 for c in range(0, len(cols), width)]
        den = 1
        for _, d in parts:
            den = lcm(den, d)
        cols = [c if den == d else tuple(x * (den // d) for x in c)
                for part, d in parts for c in part]
    return cols, den


def run(net: dict[str, Any], layers: Sequence[Layer], read: Sequence[int], toks: Sequence[Any],
        tick: Tick = forward.no_tick, size: int | None = None) -> Outputs:
    """Exact outputs ``[sequence][read position] -> tuple of Fractions``.  The layers up to
    the last attention layer run on :data:`CHUNK` (``size``) sequences at a time, their
    states joined; the token-wise layers after it run once on the joined state, so a deep
    block is walked once, not once per slice (the attention's per-sequence work lists stay
    bounded by the slice; after the last attention only the read positions are held)."""
    size = CHUNK if size is None else size
    start = 1 if net["kind"] == "token-ids" else 0
    split = max([i + 1 for i, la in enumerate(layers) if la["type"] == "attention"] + [start])
    needs = forward.needed_positions(layers, read, net["n"])
    slices: list[Sequence[Any]] = [toks[c:c + size] for c in range(0, len(toks), size)] \
        if len(toks) > size else [toks]
    parts = []
    for part in slices:
        cols, den, index = initial(net, part, layers)
        parts.append(_layers(layers, start, split, cols, den, index, needs, tick))
    cols, den, index = parts[0] if len(parts) == 1 else join(parts)
    cols, den = _tail(layers, split, len(layers), cols, den, tick, size * max(len(read), 1))
    return outputs((cols, den, index), read)


def exact_outputs(net: dict[str, Any], layers: Sequence[Layer], read: Sequence[int],
                  toks: Sequence[Any], formats: Sequence[str], tick: Tick, failures: list[str]
                  ) -> Outputs:
    """Outputs ``[sequence][read position]`` of ``toks``; one failure line per claimed format
    that does not hold (added to ``failures``).  Float-exact claims are checked
    :data:`CHUNK` sequences at a time, and a claim that holds on a slice gives its outputs;
    the slices where none holds go through one exact pass (:func:`run`)."""
    if not formats:
        return run(net, layers, read, toks, tick)
    parts: list[Outputs | None] = []
    left: list[str] = list(formats)
    rest: list[Any] = []
    needs = forward.needed_positions(layers, read, net["n"])
    for c in range(0, len(toks), CHUNK):  # one slice at a time: bounded memory
        chunk = toks[c:c + CHUNK]
        final: list[State] = []
        for f in list(left):  # a format that failed is reported once
            bad = floatexact.check(net, layers, initial(net, chunk, layers), needs, [f], final)
            if bad:
                failures += bad
                left.remove(f)
        if final:  # a claim held: its exact values are the outputs (floatexact.check)
            parts.append(outputs(final[0], read))
            tick(work_units(layers, len(chunk)))
        else:
            parts.append(None)
            rest += chunk
    exact = iter(run(net, layers, read, rest, tick) if rest else [])
    outs: Outputs = []
    for c, part in zip(range(0, len(toks), CHUNK), parts):
        outs += part if part is not None else [next(exact) for _ in toks[c:c + CHUNK]]
    return outs
