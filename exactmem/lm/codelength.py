"""Code lengths and memorized bits of a language model on a token dataset
(docs/memorized-bits.md; Morris et al. 2025, "How much do language models memorize?").

The code length of a sequence is ``-sum_t log2 p(y_t | x_<=t)`` over its predicted positions
(the label of position ``t`` is token ``t + 1``; token 0 is not predicted).  From rigorous
logit bounds ``lo <= l <= hi`` (float64, from
:func:`~exactmem.lm.positions.prove_positions`'s ``on_logits``) the code length of a label
``y`` is at most ``log2 sum_j e**(hi_j - lo_y)``, evaluated in arb ball arithmetic and rounded
up to a multiple of ``2**-DENOM_BITS``.  The reference entropy of ``n`` tokens uniform over
``V`` is ``n log2 V``; memorized bits = reference - code length, per sequence, summed with
``max(0, .)`` per sequence (Morris et al.'s sum) and without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import flint
import numpy as np

DENOM_BITS = 32  # claimed code lengths are multiples of 2**-32 bits
PREC = 128


def log2_sum(labels: Sequence[int], term: Callable[[int, int], flint.arb],
             upper: bool) -> Fraction:
    """``sum_t log2 term(t, labels[t])`` in arb at ``PREC`` bits: the upper (or lower) end
    of its ball, an exact dyadic rational."""
    old = flint.ctx.prec
    flint.ctx.prec = PREC
    try:
        total = flint.arb(0)
        ln2 = flint.arb(2).log()
        for t, y in enumerate(labels):
            total += term(t, y).log() / ln2
        man, exp = (total.upper() if upper else total.lower()).man_exp()
        return Fraction(int(man)) * Fraction(2) ** int(exp)
    finally:
        flint.ctx.prec = old


def code_length_upper(lo: np.ndarray, hi: np.ndarray, labels: Sequence[int]) -> Fraction:
    """A rigorous upper bound (a multiple of ``2**-DENOM_BITS``, plus one such unit of slack)
    on ``-sum_t log2 p(labels[t])`` for every logit array between ``lo`` and ``hi``
    (``[n, vocab]``): ``log2 sum_j e**(hi_j - lo_y)`` per position."""

    def term(t: int, y: int) -> flint.arb:
        top = flint.arb(float(lo[t, y]))
        return sum(((flint.arb(float(h)) - top).exp() for h in hi[t]), flint.arb(0))

    scale = 1 << DENOM_BITS
    return Fraction(math.ceil(log2_sum(labels, term, upper=True) * scale) + 1, scale)


def code_length_float(logits: np.ndarray, labels: Sequence[int]) -> float:
    """``-sum_t log2 p(labels[t])`` from float64 logits ``[n, vocab]`` (an estimate)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]
    ys = np.asarray(labels)
    return float(((lse - x[np.arange(len(ys)), ys]) / math.log(2)).sum())


@dataclass(frozen=True, slots=True)
class MemorizedBits:
    """Memorized bits of a dataset under the uniform reference over ``vocab`` tokens."""

    clipped: float  # sum_i max(0, H - C_i), Morris et al.'s sum
    unclipped: float  # sum_i (H - C_i)
    reference: float  # H = n log2 V per sequence


def memorized_bits(code_lengths: Sequence[float | Fraction], n: int, vocab: int) -> MemorizedBits:
    """Memorized bits from per-sequence code lengths (floats; a figure, not a bound: the
    checker states the rigorous one)."""
    h = n * math.log2(vocab)
    per = [h - float(c) for c in code_lengths]
    return MemorizedBits(sum(max(0.0, x) for x in per), sum(per), h)
