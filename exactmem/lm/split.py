"""The split producer (``prove_positions(..., producer="auto")``, the default): python-flint
``arb`` balls for the first ``k`` blocks, float64 norm balls (:mod:`exactmem.lm.normballs`)
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
proof), and ``k`` is the one with the least estimated cost in arb blocks: ``k`` a sequence,
:data:`FLOAT_BLOCK` for each norm-ball block, and one for each sequence the pass from ``j >=
k`` leaves short (a position unproved although the float64 forward pass's argmax is right):
such a sequence *climbs*, its arb state goes one block further and the norm balls start
there, up to arb logits; the proved positions are the union of all its passes.  The arb
blocks run at a precision raised until the state handed over is tighter than float64's
rounding (:mod:`exactmem.lm.arb_precision`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flint
import numpy as np

from exactmem.lm import balls as I
from exactmem.lm import normballs as N
from exactmem.lm.arb import PREC, ArbNet, Rows, decide_rows
from exactmem.lm.arb_precision import ArbStates
from exactmem.lm.batching import batch_for
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import label_margin, logits64
from exactmem.lm.normball_steps import NBall, norm_up

PROBE = 32  # sequences the switch is chosen on
FLOAT_BLOCK = 0.1  # a norm-ball block's time in arb blocks (about that on the benchmark)


def to_nball(rows: Rows, bsz: int, n: int) -> NBall:
    """Float64 midpoints ``[bsz, n, d]`` and 2-norm radii ``[bsz, n]`` enclosing arb rows.

    ``m = float(mid)`` is within ``2u|m| + eta`` of the arb midpoint (any faithful rounding);
    ``float(rad)`` is the radius (a 30-bit mantissa, so exact in float64 range; widened
    by :func:`~exactmem.lm.balls.up` anyway).  An infinite radius stays infinite:
    nothing is proved from it."""
    m = np.array([[float(v.mid()) for v in r] for r in rows], dtype=np.float64)
    r = np.array([[float(v.rad()) for v in r] for r in rows], dtype=np.float64)
    e = I.up(r + 2 * I.U * np.abs(m), 2)
    d = m.shape[-1]
    return m.reshape(bsz, n, d), norm_up(e.reshape(bsz, n, d))


def float_margin(spec: LMSpec, toks: np.ndarray, ys: np.ndarray,
                 margins: np.ndarray | None = None) -> np.ndarray:
    """``[B, n]``: the label's logit minus the best other logit in the float64 forward pass
    (:func:`~exactmem.lm.float64.logits64`, or ``margins`` when the caller has them;
    > 0 where the float argmax is right).  Only a choice of where to spend work, never a
    proof."""
    if margins is not None:
        return margins
    with np.errstate(all="ignore"):  # an overflow gives NaN margins: no climbing there
        return label_margin(logits64(spec, toks), ys)


def _short(ok: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """Sequences with a position unproved although its float argmax is right."""
    return np.flatnonzero((~ok & (margin > 0)).any(-1))


def choose_switch(w: N.NormWeights, sequences: Sequence[Sequence[int]],
                  labels: Sequence[Sequence[int]], float_margins: np.ndarray | None = None
                  ) -> int:
    """The block from which float64 norm balls take over (0: all float64; ``L``: arb up to
    the final norm), chosen on the first :data:`PROBE` sequences (module docstring)."""
    layers = w.spec.layers
    probe = min(PROBE, batch_for(w.spec, len(sequences[0])))
    toks = np.asarray(sequences[:probe], dtype=np.int64)
    ys = np.asarray(labels[:probe], dtype=np.int64)
    right = float_margin(w.spec, toks, ys,
                         None if float_margins is None else float_margins[:probe])
    with np.errstate(all="ignore"):
        mids = [N.embed(w, toks)[0]]
        for i in range(layers):  # float64 midpoints with no radius: an emulation only
            mids.append(N.layer(w, (mids[-1], np.zeros(mids[-1].shape[:-1])), i)[0])
        climb = []
        for k in range(layers + 1):
            x: NBall = (mids[k], norm_up(2 * I.U * np.abs(mids[k])))
            for i in range(k, layers):
                x = N.layer(w, x, i)
            climb.append(len(_short(N.decide(*N.head_bounds(w, x), ys)[0], right)))
    cost = [k * len(toks) + sum(climb[k:]) + FLOAT_BLOCK * (layers - k) * len(toks)
            for k in range(layers + 1)]
    return int(np.argmin(cost))


def _from(w: N.NormWeights, x: NBall, start: int, ys: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Norm balls from block ``start`` to the logits: :func:`~exactmem.lm.normballs.decide`'s
    ``(proved, margin, lo, hi)``."""
    with np.errstate(all="ignore"):  # an overflow is an infinite radius: never proved
        for i in range(start, w.spec.layers):
            x = N.layer(w, x, i)
        return N.decide(*N.head_bounds(w, x), ys)


def prove_split(spec: LMSpec, sequences: Sequence[Sequence[int]],
                labels: Sequence[Sequence[int]],
                progress: Callable[[str, int, int], None] | None = None, batch: int = 64,
                on_logits: N.OnLogits | None = None, switch: int | None = None,
                float_margins: np.ndarray | None = None
                ) -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, float], ...]], int, int,
                           int]:
    """``(proved, failed, k, climbs, bits)`` per sequence as
    :func:`~exactmem.lm.normballs.prove_fast` returns them: arb for blocks ``0 .. k-1``
    (``k = switch``, or :func:`choose_switch`), then norm balls.  A sequence with a position
    left unproved although its float argmax is right climbs: its arb state goes one block
    further and the norm balls start there, up to arb logits (the union of the proofs is
    kept); ``climbs`` counts these steps; ``bits``: the largest precision the arb blocks ran
    at (:class:`~exactmem.lm.arb_precision.ArbStates`, 0 when none ran).
    ``float_margins``: the float64 forward pass's label margins ``[N, n]`` when the caller
    already has them (else computed a batch at a time)."""
    w = N.NormWeights(spec)
    k = choose_switch(w, sequences, labels, float_margins) if switch is None else switch
    if not 0 <= k <= spec.layers:
        raise ValueError(f"switch: expected a block from 0 to {spec.layers}, found {k}")
    net = ArbNet(spec)
    states = ArbStates(net)
    proved: list[tuple[int, ...]] = []
    failed: list[tuple[tuple[int, float], ...]] = []
    climbs = 0
    old = flint.ctx.prec
    flint.ctx.prec = PREC
    try:
        for b0 in range(0, len(sequences), batch):
            chunk = sequences[b0:b0 + batch]
            ys = np.asarray(labels[b0:b0 + batch], dtype=np.int64)
            n = len(chunk[0])
            if k:
                rows = states.run(chunk, k, n)
                x = to_nball(rows, len(chunk), n)
            else:
                rows = []
                x = N.embed(w, np.asarray(chunk, dtype=np.int64))
            ok, _, lo, hi = _from(w, x, k, ys)
            margin = float_margin(spec, np.asarray(chunk, dtype=np.int64), ys,
                                  None if float_margins is None
                                  else float_margins[b0:b0 + batch])
            if on_logits is not None:
                for j in range(len(chunk)):
                    on_logits(b0 + j, lo[j], hi[j])
            level, seqs = k, np.arange(len(chunk))
            while True:
                keep = [t for t, j in enumerate(seqs) if (~ok[j] & (margin[j] > 0)).any()]
                if not keep:
                    break
                climbs += len(keep)
                flint.ctx.prec = states.prec
                if level == 0:
                    rows = net.embed(chunk)
                rows = [r for t in keep for r in rows[t * n:(t + 1) * n]]
                seqs = seqs[keep]
                if level < spec.layers:
                    rows = states.climb([chunk[int(j)] for j in seqs], rows, level, n)
                    level += 1
                    got = _from(w, to_nball(rows, len(seqs), n), level, ys[seqs])[0]
                    ok[seqs] |= got
                    continue
                logits = net.logits(rows)  # arb to the end: nothing further to climb
                for t, s in enumerate(seqs.tolist()):
                    ok[s, decide_rows(logits[t * n:(t + 1) * n], labels[b0 + s])[0]] = True
                break
            N.record(ok, margin, proved, failed)
            if progress is not None:
                progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
    finally:
        flint.ctx.prec = old
    return proved, failed, k, climbs, states.prec if k or climbs else 0
