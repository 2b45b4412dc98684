"""The exact forward pass over a slice of sequences, a bounded number at a time, and the
float-exact claims on the same slice (standard library only).

When a float-exact claim holds, its pass (floatexact.py) has computed every needed value as an
exact rational of the same function in the float mirror's order; those values are the
outputs, and the exact pass (forward.py) runs only when no claim holds.
"""

from fractions import Fraction

from . import floatexact, forward
from .dataset import initial


def work_units(layers, sequences, passes=1):
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

    def __init__(self, progress, stage, total):
        self.progress, self.stage, self.total, self.done = progress, stage, total, 0

    def __call__(self, k=1):
        self.done += k
        if self.progress is not None:
            self.progress(self.stage, self.done, self.total)


CHUNK = 8192  # sequences the exact pass holds at once (docs/checker.md)


def outputs(state, read):
    """``[sequence][read position] -> tuple of Fractions`` of a final state."""
    cols, den, index = state
    return [[tuple(Fraction(x, den) for x in cols[seq[p]]) for p in read] for seq in index]


def run(net, layers, read, toks, tick=forward.no_tick):
    """Exact outputs ``[sequence][read position] -> tuple of Fractions``."""
    cols, den, index = initial(net, toks, layers)
    start = 1 if net["kind"] == "token-ids" else 0
    needs = forward.needed_positions(layers, read, net["n"])
    for i in range(start, len(layers)):
        la = layers[i]
        if la["type"] == "feedforward":
            cols, den = forward.feedforward(la, cols, den, tick)
        else:
            cols, den, index = forward.attention(la, cols, den, index, needs[i], tick=tick)
    return outputs((cols, den, index), read)


def exact_outputs(net, layers, read, toks, formats, tick, failures):
    """Outputs ``[sequence][read position]`` of ``toks``, :data:`CHUNK` sequences at a time;
    one failure line per claimed format that does not hold (added to ``failures``)."""
    outs, left = [], list(formats)
    needs = forward.needed_positions(layers, read, net["n"])
    for c in range(0, len(toks), CHUNK):  # one slice at a time: bounded memory
        chunk = toks[c:c + CHUNK]
        final: list = []
        for f in list(left):  # a format that failed is reported once
            bad = floatexact.check(net, layers, initial(net, chunk, layers), needs, [f], final)
            if bad:
                failures += bad
                left.remove(f)
        if final:  # a claim held: its exact values are the outputs (floatexact.check)
            outs += outputs(final[0], read)
            tick(work_units(layers, len(chunk)))
        else:
            outs += run(net, layers, read, chunk, tick)
    return outs
