"""Which positions of a language model provably have the label as unique argmax: the
producer's decision (:func:`prove_positions`), with rigorous logit balls from python-flint
``arb`` (:mod:`exactmem.lm.arb`), float64 norm balls (:mod:`exactmem.lm.normballs`),
or arb for the first blocks and norm balls for the rest (:mod:`exactmem.lm.split`).

A position is proved when its label's logit ball lies strictly above every other logit ball.
This is the producer's decision only: the certificate is re-proved by the stdlib checker
(``exactmem/checker/lm/lm_forward.py``), which shares no code with these modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import flint
import numpy as np

from exactmem.lm.arb import PREC, ArbNet, decide_rows, float64
from exactmem.lm.arb_precision import ArbStates
from exactmem.lm.decoder import LMSpec

OnLogits = Callable[[int, np.ndarray, np.ndarray], None]
Progress = Callable[[str, int, int], None]
PRODUCERS = ("auto", "fast", "hybrid", "arb")
Proved = list[tuple[int, ...]]
Failed = list[tuple[tuple[int, float], ...]]


@dataclass(frozen=True, slots=True)
class PositionBounds:
    """Per sequence: the positions proved, and for the others the float margin of the label
    (midpoint logit of the label minus the best other midpoint; < 0: not even the float
    argmax).  ``switch``: with ``producer="auto"``, the block from which float64 took over;
    ``rerun``: sequences proved again in full arb; ``arb_bits``: the largest precision the
    arb blocks ran at (:mod:`exactmem.lm.arb_precision`; 0 when none ran)."""

    proved: tuple[tuple[int, ...], ...]
    failed: tuple[tuple[tuple[int, float], ...], ...]
    switch: int | None = None
    rerun: int = 0
    arb_bits: int = 0

    @property
    def count(self) -> int:
        return sum(map(len, self.proved))


def prove_arb(spec: LMSpec, sequences: Sequence[Sequence[int]],
              labels: Sequence[Sequence[int]], progress: Progress | None = None,
              batch: int = 64, on_logits: OnLogits | None = None) -> tuple[Proved, Failed]:
    """Every block in arb, at :data:`~exactmem.lm.arb.PREC` bits or more
    (:class:`~exactmem.lm.arb_precision.ArbStates`)."""
    old = flint.ctx.prec
    flint.ctx.prec = PREC
    try:
        states = ArbStates(ArbNet(spec))
        proved: Proved = []
        failed: Failed = []
        for b0 in range(0, len(sequences), batch):
            chunk = sequences[b0:b0 + batch]
            n = len(chunk[0])
            x = states.run(chunk, spec.layers, n)
            logits = states.net.logits(x)
            for j in range(len(chunk)):
                if on_logits is not None:
                    rows = logits[j * n:(j + 1) * n]
                    lo64 = np.array([[float64(v.lower(), True) for v in r] for r in rows])
                    hi64 = np.array([[float64(v.upper(), False) for v in r] for r in rows])
                    on_logits(b0 + j, lo64, hi64)
                ok, bad = decide_rows(logits[j * n:(j + 1) * n], labels[b0 + j])
                proved.append(tuple(ok))
                failed.append(tuple(bad))
            if progress is not None:
                progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
        return proved, failed
    finally:
        flint.ctx.prec = old


def prove_positions(spec: LMSpec, sequences: Sequence[Sequence[int]],
                    labels: Sequence[Sequence[int]], progress: Progress | None = None,
                    batch: int | None = None, on_logits: OnLogits | None = None,
                    producer: str = "auto", switch: int | None = None,
                    float_margins: np.ndarray | None = None) -> PositionBounds:
    """Rigorous logit balls for every position; the positions whose label is provably the
    unique argmax.  ``batch`` sequences are evaluated together (memory vs speed; default
    :func:`~exactmem.lm.batching.batch_for`, so that memory is bounded by the model's shape).

    ``producer``: ``"auto"`` (arb for the first blocks, float64 norm balls from the block
    :func:`~exactmem.lm.split.choose_switch` picks, or ``switch``; a sequence with a
    position left unproved although the float argmax is right goes on in arb block by block),
    ``"fast"`` (float64 norm balls throughout), ``"hybrid"`` (fast, then that arb rerun) or
    ``"arb"`` (python-flint at 128 bits throughout: the slow reference).  Where two passes
    ran, the proved positions are the union of both proofs.  ``on_logits(i, lo, hi)``,
    called once per sequence ``i``, receives float64 arrays ``[n, vocab]`` with ``lo <=
    logit <= hi`` at every position (from the first pass; arb ball ends rounded outward),
    e.g. for the code length of :mod:`exactmem.lm.codelength`.  ``float_margins``
    (``"auto"``): the float64 forward pass's label margins ``[N, n]``
    (:func:`~exactmem.lm.float64.label_margin`) when the caller has them, so that ``"auto"``
    does not compute them again."""
    if producer not in PRODUCERS:
        raise ValueError(f"producer: expected one of {', '.join(PRODUCERS)}, found "
                         f"{producer!r}")
    if batch is None:
        from exactmem.lm.batching import batch_for

        batch = batch_for(spec, len(sequences[0])) if len(sequences) else 1
    if producer == "arb":
        got, miss = prove_arb(spec, sequences, labels, progress, batch, on_logits)
        return PositionBounds(tuple(got), tuple(miss))
    if producer == "auto":
        from exactmem.lm.split import prove_split

        got, miss, k, climbs, bits = prove_split(spec, sequences, labels, progress, batch,
                                                 on_logits, switch, float_margins)
        return PositionBounds(tuple(got), tuple(miss), k, climbs, bits)
    from exactmem.lm.normballs import prove_fast

    got, miss = prove_fast(spec, sequences, labels, progress, batch, on_logits)
    again = [i for i, row in enumerate(miss) if any(m > 0 for _, m in row)]
    if producer == "fast" or not again:
        return PositionBounds(tuple(got), tuple(miss))
    ref, _ = prove_arb(spec, [sequences[i] for i in again], [labels[i] for i in again],
                       progress, batch)
    for j, i in enumerate(again):  # both are proofs: the union is proved
        got[i] = tuple(sorted(set(got[i]) | set(ref[j])))
        miss[i] = tuple((p, m) for p, m in miss[i] if p not in got[i])
    return PositionBounds(tuple(got), tuple(miss), None, len(again))
