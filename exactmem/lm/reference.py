"""The reference model of a ``mem_U`` claim (Morris et al. 2025; docs/memorized-bits.md,
"mem_U against a reference model"): its import cross-checked like the model's, rigorous lower
and upper bounds of its code length of every sequence, and the ``reference`` object of the
certificate (:mod:`exactmem.checker.lm.lm_reference` re-derives both bounds).

In the paper's notation the trained model is ``theta^`` and the reference ``theta``;
``mem_U(x) = C_theta(x) - min(C_theta(x), C_theta^(x))`` with ``C_m(x) = -log2 p(x | m)``.
From logit bounds ``lo <= l <= hi`` the code length of a label ``y`` is at least
``log2 (1 + sum_{j != y} e**(lo_j - hi_y))`` (the label's own term is exactly 1) and at most
``log2 sum_j e**(hi_j - lo_y)`` (:func:`~exactmem.lm.codelength.code_length_upper`), each
evaluated in arb and rounded outward to a multiple of ``2**-DENOM_BITS`` with one unit of
slack.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.codelength import DENOM_BITS, code_length_float, code_length_upper, log2_sum
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import label_margin

CROSS_CHECK_TOL = 1e-6  # relative to the largest logit, as the model's own cross-check


def code_length_lower(lo: np.ndarray, hi: np.ndarray, labels: Sequence[int]) -> Fraction:
    """A rigorous lower bound (a multiple of ``2**-DENOM_BITS``, one unit of slack, at least
    0) on ``-sum_t log2 p(labels[t])`` for every logit array between ``lo`` and ``hi``
    (``[n, vocab]``): ``log2 (1 + sum_{j != y} e**(lo_j - hi_y))`` per position."""

    def term(t: int, y: int) -> flint.arb:
        top = flint.arb(float(hi[t, y]))
        return flint.arb(1) + sum(((flint.arb(float(low)) - top).exp()
                                   for j, low in enumerate(lo[t]) if j != y), flint.arb(0))

    scale = 1 << DENOM_BITS
    return Fraction(max(0, math.floor(log2_sum(labels, term, upper=False) * scale) - 1), scale)


def floor_claim(lower: int, p: int) -> Fraction:
    """The checker's lower bound ``lower`` (units ``2**-p``) as a claim: rounded down to
    ``2**-DENOM_BITS`` bits, less one unit, at least 0."""
    return Fraction(max(0, (lower >> (p - DENOM_BITS)) - 1), 1 << DENOM_BITS)


def ceil_claim(upper: int, p: int) -> Fraction:
    """The checker's upper bound ``upper`` (units ``2**-p``) as a claim: rounded up to
    ``2**-DENOM_BITS`` bits, plus one unit."""
    return Fraction(-(-upper >> (p - DENOM_BITS)) + 1, 1 << DENOM_BITS)


def _text(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


@dataclass
class Reference:
    """The reference model ``spec`` (``name`` for messages) and, per sequence, the claimed
    bounds ``lower[i] <= C_theta(x_i) <= upper[i]`` and the float64 estimate."""

    spec: LMSpec
    name: str
    logits: np.ndarray  # its float64 logits on the dataset, [N, n, vocab]
    lower: list[Fraction] = field(default_factory=list)
    upper: list[Fraction] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)

    @classmethod
    def cross_checked(cls, spec: LMSpec, theirs: np.ndarray, name: str, model: LMSpec,
                      toks: np.ndarray, compared: str) -> Reference:
        """The reference ``spec`` after its float64 forward pass agrees with ``theirs``
        (the checkpoint's own, ``compared``) and its vocabulary is the model's."""
        from exactmem.lm.float64 import logits64

        if spec.vocab_size != model.vocab_size:
            raise SpecError(f"--reference {name}: a vocabulary of {spec.vocab_size} tokens, "
                            f"the model's has {model.vocab_size} (one tokenizer for both)")
        if toks.shape[1] > spec.context:
            raise SpecError(f"--reference {name}: sequences of {toks.shape[1]} tokens exceed "
                            f"its context of {spec.context}")
        ours = logits64(spec, toks)
        gap = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape \
            else float("inf")
        if not gap <= CROSS_CHECK_TOL * max(1.0, float(np.abs(theirs).max())):
            raise SpecError(f"--reference {name}: the imported function's float64 logits "
                            f"differ from {compared} by {gap:.3g}: not certifying")
        return cls(spec, name, ours)

    def bound(self, sequences: Sequence[Sequence[int]], labels: Sequence[Sequence[int]],
              progress: Callable[[str, int, int], None] | None, producer: str) -> None:
        """Rigorous bounds of the reference's code length of every sequence
        (:func:`~exactmem.lm.positions.prove_positions`'s logit balls)."""
        from exactmem.lm.positions import prove_positions

        lows: dict[int, Fraction] = {}
        ups: dict[int, Fraction] = {}

        def on_logits(i: int, lo: np.ndarray, hi: np.ndarray) -> None:
            lows[i] = code_length_lower(lo, hi, labels[i])
            ups[i] = code_length_upper(lo, hi, labels[i])

        prove_positions(self.spec, sequences, labels, progress, on_logits=on_logits,
                        producer=producer,
                        float_margins=label_margin(self.logits, np.asarray(labels)))
        self.lower = [lows[i] for i in range(len(sequences))]
        self.upper = [ups[i] for i in range(len(sequences))]
        self.floats = [code_length_float(x, y) for x, y in zip(self.logits, labels,
                                                              strict=True)]

    def adopt(self, derived: dict[int, tuple[int, int]], p: int) -> int:
        """Claim the checker's own bounds (``derived[i] = (lower, upper)`` at ``2**-p``)
        where they differ from the producer's: what is written is what the checker
        re-proves.  Returns how many sequences changed."""
        changed = 0
        for i, (lo, hi) in derived.items():
            low, up = floor_claim(lo, p), ceil_claim(hi, p)
            if (low, up) != (self.lower[i], self.upper[i]):
                self.lower[i], self.upper[i] = low, up
                changed += 1
        return changed

    def attach(self, cert: dict[str, Any]) -> dict[str, Any]:
        """``cert`` with the ``reference`` object (the model in the certificate's format,
        the claimed bounds) and its digest recomputed."""
        from exactmem.lm.certfile import model_json
        from exactmem.model.dataset import canonical_json

        body = {k: v for k, v in cert.items() if k != "digest"}
        body["reference"] = {"model": model_json(self.spec),
                             "code_length_bits": [_text(u) for u in self.upper],
                             "code_length_lower_bits": [_text(x) for x in self.lower]}
        body["digest"] = "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()
        return body


def mem_u(lower: Sequence[Fraction], upper: Sequence[Fraction], own: Sequence[Any],
          once: Sequence[int]) -> Fraction:
    """Morris et al.'s clipped sum over the distinct sequences ``once``:
    ``sum max(0, L_theta - min(U_theta, U_theta^))`` (a lower bound of ``mem_U`` when
    the arguments are the proved bounds; a float estimate from float code lengths)."""
    return sum((max(Fraction(0), Fraction(lower[i]) - min(Fraction(upper[i]),
                                                           Fraction(own[i])))
                for i in once), Fraction(0))


def distinct(sequences: Sequence[Sequence[int]], labels: Sequence[Sequence[int]]) -> list[int]:
    """The indices of the sequences that do not repeat an earlier one (tokens and labels)."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out = []
    for i, (s, y) in enumerate(zip(sequences, labels, strict=True)):
        key = (tuple(s), tuple(y))
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out
