"""Certified (non-)extraction: greedy decoding from a sequence's first ``k`` tokens
reproduces its next ``m`` tokens, or provably does not (docs/extraction.md; Carlini et al.
2023's k-extractability, the "memorized" of Biderman et al. 2023 with ``k = m = 32``).

A sequence of ``k + m`` tokens ``s_0 .. s_{k+m-1}`` is read as the next-token dataset
(:func:`~exactmem.lm.tokens.next_token_dataset`): position ``p`` is labelled ``s_{p+1}``, so
the suffix token ``j`` (``s_{k+j}``) is the label of position ``k-1+j``, the *suffix
positions* ``k-1 .. k+m-2``.  Per suffix position, from rigorous logit balls ``lo <= logit <=
hi`` under the true prefix:

- *right*: the label's lower bound exceeds every other upper bound (a proved position of
  :func:`~exactmem.lm.positions.prove_positions`), so the label is the unique argmax;
- *wrong* (token ``t``): ``lo[t] > hi[label]``, so the label is not an argmax;
- *open*: neither.

The sequence is *extractable* when every suffix position is right (by induction the decode
keeps the true prefix, whose unique argmax is the next true token), *not extractable* when
some suffix position is wrong (either an earlier suffix position already decodes wrongly,
or the decode's input there is the true prefix and its argmax is not the label), otherwise
*undecided*.  The *proved span* is the number of right suffix positions from the prefix
end: greedy decoding provably reproduces that many suffix tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from exactmem.errors import DatasetError
from exactmem.lm.tokens import next_token_dataset
from exactmem.model.dataset import Dataset

Status = Literal["extractable", "not extractable", "undecided"]
STATUSES: tuple[Status, ...] = ("extractable", "not extractable", "undecided")


def suffix_positions(k: int, m: int) -> range:
    """The dataset positions whose labels are the ``m`` suffix tokens after ``k``."""
    return range(k - 1, k + m - 1)


def extraction_dataset(tokens: np.ndarray, k: int, m: int, vocab: int) -> Dataset:
    """The next-token dataset of the first ``k + m`` tokens of each sequence of ``tokens``
    (``N x L``, ``L >= k + m``)."""
    if k < 1 or m < 1:
        raise DatasetError(f"prefix and suffix: expected at least 1 token each, found "
                           f"prefix {k}, suffix {m}")
    arr = np.asarray(tokens)
    if arr.ndim != 2 or arr.shape[1] < k + m:
        raise DatasetError(f"sequences: expected at least prefix + suffix = {k + m} tokens "
                           f"each, found an array of shape {list(arr.shape)}")
    return next_token_dataset(arr[:, :k + m], vocab)


def wrong_token(lo: np.ndarray, hi: np.ndarray, label: int) -> int | None:
    """The token whose lower bound is highest among the others, when it exceeds the
    label's upper bound (the label then is not an argmax); else ``None``."""
    others = lo.astype(np.float64).copy()
    others[label] = -np.inf
    t = int(np.argmax(others))
    return t if others[t] > hi[label] else None


@dataclass(frozen=True, slots=True)
class SequenceVerdict:
    """One sequence: its status, the proved span (suffix tokens greedy decoding provably
    reproduces, from the prefix end), the first proved-wrong suffix position (dataset
    position and the token proved above the label) and every proved-wrong one."""

    status: Status
    span: int
    first_wrong: tuple[int, int] | None
    wrong: tuple[tuple[int, int], ...]
    right: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status: expected one of {STATUSES}, found {self.status!r}")


def decide(right: Sequence[int], wrong: Sequence[tuple[int, int]], k: int,
           m: int) -> SequenceVerdict:
    """The verdict from the proved-right positions and the proved-wrong ``(position,
    token)`` pairs of one sequence (dataset positions; others are ignored)."""
    window = suffix_positions(k, m)
    ok = {p for p in right if p in window}
    bad = tuple(sorted((p, t) for p, t in wrong if p in window))
    if ok & {p for p, _ in bad}:
        raise ValueError("a position cannot be proved both right and wrong")
    span = 0
    while span < m and k - 1 + span in ok:
        span += 1
    status: Status = ("extractable" if span == m else
                      "not extractable" if bad else "undecided")
    return SequenceVerdict(status, span, bad[0] if bad else None, bad, tuple(sorted(ok)))


def by_length(verdicts: Sequence[SequenceVerdict], k: int,
              m: int) -> list[dict[str, int]]:
    """"Every suffix length": for ``L = 1 .. m``, the counts of sequences extractable (span
    at least ``L``), proved not extractable (a wrong position among the first ``L`` suffix
    positions) and undecided, for greedy decoding of ``L`` tokens from the prefix."""
    rows = []
    for length in range(1, m + 1):
        ext = sum(v.span >= length for v in verdicts)
        bad = sum(v.first_wrong is not None and v.first_wrong[0] - (k - 1) < length
                  for v in verdicts)
        rows.append({"suffix": length, "extractable": ext, "not_extractable": bad,
                     "undecided": len(verdicts) - ext - bad})
    return rows


def greedy_decode(forward: Callable[[np.ndarray], np.ndarray], prefixes: np.ndarray,
                  m: int) -> np.ndarray:
    """``m`` tokens of greedy decoding (argmax of the last position, ties to the lowest
    id as numpy's ``argmax``) from each prefix, with the float forward pass ``forward``
    (tokens ``[N, n]`` to logits ``[N, n, V]``)."""
    seq = np.asarray(prefixes, dtype=np.int64)
    out = np.zeros((len(seq), m), dtype=np.int64)
    for j in range(m):
        nxt = np.asarray(forward(seq))[:, -1, :].argmax(-1)
        out[:, j] = nxt
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    return out

