"""The float64 stage of ``certify-model``, a batch at a time: the checkpoint's own forward
pass (torch) against the imported function's (:func:`~exactmem.lm.float64.logits64`), and
what later stages keep of it -- the label margins ``[N, n]``, the float64 code lengths, and the
logits of the first few sequences (for the readings of the config) -- so that no stage holds
the logits of the whole dataset (``[N, n, vocab]``: 25 GB per 64,000 positions at GPT-2's
vocabulary).  Batches are :func:`~exactmem.lm.batching.batch_for` sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from exactmem.lm.batching import batch_for
from exactmem.lm.codelength import code_length_float
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import label_margin, logits64

Forward = Callable[[np.ndarray], "np.ndarray | Iterable[np.ndarray]"]


@dataclass(frozen=True, slots=True)
class FloatPass:
    """``margins``: the label's float64 logit minus the best other's, ``[N, n]`` (> 0 where
    the float argmax is right); ``code_lengths``: ``-sum log2 p(label)`` per sequence from
    the float64 logits (an estimate); ``head``: the logits of the first ``keep`` sequences;
    ``gap``: the largest difference between the two forward passes; ``scale``: the largest
    logit of theirs."""

    margins: np.ndarray
    code_lengths: list[float]
    head: np.ndarray
    gap: float
    scale: float


def batches(theirs: Forward, tokens: np.ndarray, step: int) -> Iterator[np.ndarray]:
    """``theirs`` on ``tokens``: its batches when it yields them, else its array cut into
    batches of ``step`` sequences."""
    out = theirs(tokens)
    if isinstance(out, np.ndarray):
        for start in range(0, len(out), step):
            yield out[start:start + step]
    else:
        yield from out


def all_logits(theirs: Forward, tokens: np.ndarray) -> np.ndarray:
    """``theirs`` on ``tokens`` as one array ``[N, n, vocab]`` (for the stages that need
    them all: small models only)."""
    out = theirs(tokens)
    return out if isinstance(out, np.ndarray) else np.concatenate(list(out))


def float_pass(spec: LMSpec, tokens: np.ndarray, labels: Sequence[Sequence[int]],
               theirs: Forward, keep: int,
               progress: Callable[[str, int, int], None] | None = None) -> FloatPass:
    """Run ``theirs`` (float64 logits of a batch of tokens) and ``logits64`` side by side,
    a batch at a time; keep the margins, the code lengths and the first ``keep`` sequences'
    logits."""
    ys = np.asarray([list(y) for y in labels], dtype=np.int64)
    step = batch_for(spec, tokens.shape[1])
    margins = np.empty(tokens.shape, dtype=np.float64)
    lengths: list[float] = []
    head: list[np.ndarray] = []
    gap = scale = 0.0
    start = 0
    for z in batches(theirs, tokens, step):
        stop = start + len(z)
        ours = logits64(spec, tokens[start:stop])
        if z.shape != ours.shape:
            gap = float("inf")
        else:
            gap = max(gap, float(np.abs(z - ours).max()))
            scale = max(scale, float(np.abs(z).max()))
        with np.errstate(all="ignore"):
            margins[start:stop] = label_margin(ours, ys[start:stop])
        lengths += [code_length_float(x, y) for x, y in zip(ours, ys[start:stop], strict=True)]
        if start < keep:
            head.append(ours[:keep - start])
        start = stop
        if progress is not None:
            progress("float64", start, len(tokens))
    if start != len(tokens):
        gap = float("inf")
    return FloatPass(margins, lengths, np.concatenate(head) if head else np.zeros((0,)),
                     gap, scale)
