"""Language-model datasets: token sequences with the next token as the label at every
position, in the existing ``exactmem.dataset/1`` format (task ``seq2seq``, token ids).

A sequence of ``L`` tokens ``t_0 .. t_{L-1}`` becomes the input ``t_0 .. t_{L-2}`` with the
labels ``t_1 .. t_{L-1}``: position ``p`` is labelled with the token that follows it.
Sources: a numpy array ``[N, L]`` of integers (``.npy``) or a text file with one sequence per
line, tokens separated by white space.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset


def next_token_dataset(tokens: np.ndarray | list[list[int]], vocab_size: int) -> Dataset:
    """The next-token dataset of the sequences ``tokens`` (``N x L``, ``L >= 2``)."""
    arr = np.asarray(tokens)
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[0] < 1:
        raise DatasetError(f"tokens: expected N >= 1 sequences of L >= 2 tokens, found an "
                           f"array of shape {list(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise DatasetError(f"tokens: expected integers, found dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() >= vocab_size:
        raise DatasetError(f"tokens: ids must lie in [0, {vocab_size}), found "
                           f"[{arr.min()}, {arr.max()}]")
    rows = [[int(t) for t in r] for r in arr]
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=vocab_size,
                   sequences=tuple(tuple(r[:-1]) for r in rows),
                   labels=tuple(tuple(r[1:]) for r in rows))


def read_tokens(path: str | Path) -> np.ndarray:
    """Token sequences from a ``.npy`` array or a text file (one sequence a line)."""
    path = Path(path)
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        lines = [ln.split() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read token sequences: {exc}") from None
    if not lines or len({len(ln) for ln in lines}) != 1:
        raise DatasetError(f"{path}: expected non-empty lines of one length (tokens per line)")
    try:
        return np.array([[int(t) for t in ln] for ln in lines], dtype=np.int64)
    except ValueError as exc:
        raise DatasetError(f"{path}: a token is not an integer: {exc}") from None
