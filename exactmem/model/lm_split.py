"""The split producer (``prove_positions(..., producer="auto")``, the default): python-flint
``arb`` balls for the first ``k`` blocks, float64 norm balls (:mod:`exactmem.model.lm_norm`)
from block ``k`` to the logits.

Why: a rounding error made early is stretched by every later block, so the first blocks of a
trained model need more than float64's 53 bits (the norm-ball pass from the embedding proves
nothing on the trained benchmark of docs/results/gpt2_1m.csv), while an error made in the
last blocks is stretched little.  Sound for any ``k``: the arb state after block ``k`` is a
list of balls that contain the exact residual stream; :func:`to_nball` turns it into float64
midpoints and one 2-norm radius a position that contain the same vectors, and the norm-ball
pass is rigorous from any enclosure.

Which ``k`` (:func:`choose_switch`): on the first sequences, the norm-ball pass is run from
every block ``k`` on float64 midpoints (an emulation: cheap, and only a choice, never a
proof), and ``k`` is the one with the least estimated cost, ``k`` arb blocks a sequence plus
``L + 1`` for each sequence the pass from ``k`` would leave to a full arb rerun beyond the
ones the pass from ``L`` leaves.  Positions the pass leaves unproved although their float
argmax is right are proved again in full arb by the caller (the union of two proofs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flint
import numpy as np

from exactmem.model import lm_interval as I
from exactmem.model import lm_norm as N
from exactmem.model.lm_arb import PREC, ArbNet, Rows
from exactmem.model.lm_spec import LMSpec

PROBE = 32  # sequences the switch is chosen on


def to_nball(rows: Rows, bsz: int, n: int) -> N.NBall:
    """Float64 midpoints ``[bsz, n, d]`` and 2-norm radii ``[bsz, n]`` enclosing arb rows.

    ``m = float(mid)`` is within ``2u|m| + eta`` of the arb midpoint (any faithful rounding);
    ``float(rad)`` is the radius (a 30-bit mantissa, so exact in float64 range; widened
    by :func:`~exactmem.model.lm_interval.up` anyway).  An infinite radius stays infinite:
    nothing is proved from it."""
    m = np.array([[float(v.mid()) for v in r] for r in rows], dtype=np.float64)
    r = np.array([[float(v.rad()) for v in r] for r in rows], dtype=np.float64)
    e = I.up(r + 2 * I.U * np.abs(m), 2)
    d = m.shape[-1]
    return m.reshape(bsz, n, d), N.norm_up(e.reshape(bsz, n, d))


def _fallbacks(ok: np.ndarray, margin: np.ndarray) -> set[int]:
    """Sequences with a position unproved although its float argmax is right."""
    return {int(j) for j in np.flatnonzero((~ok & (margin > 0)).any(-1))}


def choose_switch(w: N.NormWeights, sequences: Sequence[Sequence[int]],
                  labels: Sequence[Sequence[int]]) -> int:
    """The block from which float64 norm balls take over (0: all float64; ``L``: arb up to
    the final norm), chosen on the first :data:`PROBE` sequences (module docstring)."""
    layers = w.spec.layers
    toks = np.asarray(sequences[:PROBE], dtype=np.int64)
    ys = np.asarray(labels[:PROBE], dtype=np.int64)
    with np.errstate(all="ignore"):
        mids = [N.embed(w, toks)[0]]
        for i in range(layers):  # float64 midpoints with no radius: an emulation only
            mids.append(N.layer(w, (mids[-1], np.zeros(mids[-1].shape[:-1])), i)[0])
        left = []
        for k in range(layers + 1):
            x: N.NBall = (mids[k], N.norm_up(2 * I.U * np.abs(mids[k])))
            for i in range(k, layers):
                x = N.layer(w, x, i)
            ok, margin, _, _ = N.decide(*N.head_bounds(w, x), ys)
            left.append(_fallbacks(ok, margin))
    cost = [k * len(toks) + (layers + 1) * len(left[k] - left[layers])
            for k in range(layers + 1)]
    return int(np.argmin(cost))


def prove_split(spec: LMSpec, sequences: Sequence[Sequence[int]],
                labels: Sequence[Sequence[int]],
                progress: Callable[[str, int, int], None] | None = None, batch: int = 64,
                on_logits: N.OnLogits | None = None, switch: int | None = None
                ) -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, float], ...]], int]:
    """``(proved, failed, k)`` per sequence as :func:`~exactmem.model.lm_norm.prove_fast`
    returns them, arb for blocks ``0 .. k-1`` (``k = switch``, or :func:`choose_switch`)."""
    w = N.NormWeights(spec)
    k = choose_switch(w, sequences, labels) if switch is None else switch
    if not 0 <= k <= spec.layers:
        raise ValueError(f"switch: expected a block from 0 to {spec.layers}, found {k}")
    if k == 0:
        got, miss = N.prove_fast(spec, sequences, labels, progress, batch, on_logits)
        return got, miss, 0
    net = ArbNet(spec)
    proved: list[tuple[int, ...]] = []
    failed: list[tuple[tuple[int, float], ...]] = []
    for b0 in range(0, len(sequences), batch):
        chunk = sequences[b0:b0 + batch]
        n = len(chunk[0])
        old = flint.ctx.prec
        flint.ctx.prec = PREC
        try:
            rows = net.embed(chunk)
            for i in range(k):
                rows = net.layer(rows, i, n)
            x = to_nball(rows, len(chunk), n)
        finally:
            flint.ctx.prec = old
        with np.errstate(all="ignore"):  # an overflow is an infinite radius: never proved
            for i in range(k, spec.layers):
                x = N.layer(w, x, i)
            ok, margin, lo, hi = N.decide(*N.head_bounds(w, x),
                                          np.asarray(labels[b0:b0 + batch], dtype=np.int64))
        N.record(ok, margin, proved, failed)
        if on_logits is not None:
            for j in range(len(chunk)):
                on_logits(b0 + j, lo[j], hi[j])
        if progress is not None:
            progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
    return proved, failed, k
