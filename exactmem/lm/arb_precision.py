"""How many bits the arb blocks of the producer carry (:mod:`exactmem.lm.split`,
:func:`~exactmem.lm.positions.prove_arb`).

An arb ball's radius grows through every block by a factor that depends on the weights, not
on the precision: on ``transformers``' GPT-2 initialisation (std 0.02, so LayerNorm divides
by a standard deviation near 0.02) about ``2^23`` a block, so 128 bits are spent after five
or six of GPT-2 small's twelve blocks (docs/trained-models.md, "How many bits the arb blocks
carry").  The float64 norm balls that take over after block ``k`` start from the float64
rounding of the midpoints, ``2^-53`` relative, so an arb state handed over with a larger
radius proves nothing the float64 pass could not.

:class:`ArbStates` therefore measures the radius after every arb block (log2 of the largest,
:func:`radius_bits`) and, when the state it hands over has a radius above ``2^-TARGET``,
raises the precision by the bits missing (:func:`wanted`: the growth seen on the way,
extrapolated where a radius became unbounded) and computes the state again from the
embedding; the raised precision is kept for the batches after.  The first state deeper
than two blocks starts from a guess: blocks 0 and 1 of a short probe show the growth a
block (:meth:`ArbStates.guess`).  At most :data:`MAX_PREC` bits (the checker's own
ceiling, ``lm_model.MAX_F``): a model whose balls grow by more is
handed over as it is, and its positions may stay unproved.  Any precision is sound; this
only chooses one under which the positions can be proved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flint

from exactmem.lm.arb import PREC, ArbNet, Rows

TARGET = 64  # the handed-over radius should be below 2^-TARGET (float64 rounds at 2^-53)
MAX_PREC = 1024  # bits; as the checker's largest working precision
STEP = 32  # precisions are multiples of STEP bits
START = PREC  # the precision the first batch starts from
PROBE_TOKENS = 8  # tokens of the first sequence that two blocks are run on to guess


def radius_bits(rows: Rows) -> float:
    """``log2`` of the largest radius in ``rows``: ``-inf`` when every ball is exact, ``inf``
    when a radius is unbounded (infinite or not a number)."""
    top = 0.0
    for row in rows:
        for v in row:
            r = float(v.rad())
            if not r <= top:  # larger, or NaN
                if math.isnan(r) or math.isinf(r):
                    return math.inf
                top = r
    return math.log2(top) if top > 0 else -math.inf


def wanted(prec: int, bits: Sequence[float]) -> int:
    """The precision under which the last of ``bits`` (``log2`` of the largest radius after
    each block, at ``prec`` bits) would be at most ``-TARGET``: the radius of a rounding
    error scales as ``2^-prec``, so ``prec + last + TARGET`` rounded up to :data:`STEP`,
    never below ``prec``, at most :data:`MAX_PREC`.  An unbounded or large (``>= 0``) last
    value is extrapolated from the last radius below 1 by the largest growth a block seen
    before it (at least :data:`STEP` bits a block); with none below 1, twice ``prec``."""
    if not bits or bits[-1] == -math.inf:
        return prec
    last = bits[-1]
    if not last < 0:
        small = [j for j, b in enumerate(bits) if b < 0]
        if not small:
            return min(2 * prec, MAX_PREC)
        j = small[-1]
        steps = [b - a for a, b in zip(bits[:j], bits[1:j + 1], strict=True)
                 if a > -math.inf]
        growth = max([float(STEP), *steps])
        last = bits[j] + growth * (len(bits) - 1 - j)
    return _need(prec, last)


def _need(prec: int, bits: float) -> int:
    """The precision at which a radius of ``2^bits`` at ``prec`` bits becomes at most
    ``2^-TARGET``, a multiple of :data:`STEP` from ``prec`` to :data:`MAX_PREC`."""
    need = -(-(prec + math.ceil(bits) + TARGET) // STEP) * STEP
    return min(max(need, prec), MAX_PREC)


class ArbStates:
    """Arb states of token chunks after a number of blocks, at a precision under which their
    radius stays below ``2^-TARGET`` (module docstring).  ``prec``: the precision in force,
    raised as needed and kept; ``raised``: how many times a state was computed again."""

    def __init__(self, net: ArbNet, prec: int | None = None) -> None:
        self.net = net
        self.prec = START if prec is None else prec
        self.raised = 0
        self.guessed = False

    def _blocks(self, rows: Rows, start: int, stop: int, n: int,
                prec: int | None = None) -> tuple[Rows, list[float]]:
        bits = []
        flint.ctx.prec = self.prec if prec is None else prec
        for i in range(start, stop):
            rows = self.net.layer(rows, i, n)
            bits.append(radius_bits(rows))
        return rows, bits

    def _raise(self, bits: Sequence[float]) -> bool:
        """Raise :attr:`prec` as ``bits`` ask; False when it cannot or need not."""
        need = wanted(self.prec, bits)
        if need <= self.prec:
            return False
        self.prec = need
        self.raised += 1
        return True

    def guess(self, chunk: Sequence[Sequence[int]], depth: int) -> int:
        """A precision for ``depth`` blocks from blocks 0 and 1 of a short probe (the first
        :data:`PROBE_TOKENS` tokens of the first sequence: attention is causal, so these are
        the same positions as in the whole sequence): the radius after block 1 grown by
        block 1's growth for each further block, 16 bits to spare (:func:`_need`); a probe
        whose radius reaches 1 is run again at twice the precision."""
        probe = [list(chunk[0][:PROBE_TOKENS])]
        prec = self.prec
        while True:  # a radius of 1 or more measures nothing: the probe again at 2x the bits
            flint.ctx.prec = prec
            _, bits = self._blocks(self.net.embed(probe), 0, 2, len(probe[0]), prec)
            if bits[1] < 0 or prec >= MAX_PREC:
                break
            prec = min(2 * prec, MAX_PREC)
        flint.ctx.prec = self.prec
        if not all(math.isfinite(b) for b in bits):
            return prec
        return _need(prec, bits[1] + (bits[1] - bits[0]) * (depth - 2) + 16)

    def run(self, chunk: Sequence[Sequence[int]], depth: int, n: int) -> Rows:
        """The embedding of ``chunk`` (sequences of ``n`` tokens) through blocks ``0 ..
        depth - 1``; the first state deeper than two blocks starts from :meth:`guess`."""
        if not self.guessed and depth > 2:
            self.guessed = True
            self.prec = max(self.prec, self.guess(chunk, depth))
        while True:
            flint.ctx.prec = self.prec
            rows, bits = self._blocks(self.net.embed(chunk), 0, depth, n)
            if not self._raise(bits):
                return rows

    def climb(self, chunk: Sequence[Sequence[int]], rows: Rows, level: int, n: int) -> Rows:
        """``rows`` (``chunk`` after ``level`` blocks) through block ``level``; computed
        again from the embedding when the radius passes the target."""
        out, bits = self._blocks(rows, level, level + 1, n)
        if not self._raise(bits):
            return out
        return self.run(chunk, level + 1, n)
