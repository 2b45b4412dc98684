"""Datasets: N labelled sequences of length n (token ids or rational vectors).

The file format ``exactmem.dataset/1`` is documented in ``docs/dataset-format.md``.
Parsing is exact: numbers are ints or ``"p/q"`` strings; a float is refused with the
path of the offending field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from exactmem.arith import format_rational, to_rational
from exactmem.errors import DatasetError, NotExactError

DATASET_FORMAT = "exactmem.dataset/1"
Task = Literal["next-token", "seq2seq"]
Token = Hashable  # an int id, or a tuple of Fractions
Vector = tuple[Fraction, ...]


@dataclass(frozen=True, slots=True)
class Dataset:
    """N sequences of n tokens with labels (one per sequence, or one per position for seq2seq)."""

    task: Task
    inputs: Literal["token-ids", "vectors"]
    sequences: tuple[tuple[Any, ...], ...]
    labels: tuple[Any, ...]
    vocab_size: int | None = None
    dim: int | None = None

    def __post_init__(self) -> None:
        if self.task not in ("next-token", "seq2seq"):
            raise DatasetError(f"task: expected 'next-token' or 'seq2seq', found {self.task!r}")
        if self.inputs not in ("token-ids", "vectors"):
            raise DatasetError(f"inputs: expected 'token-ids' or 'vectors', found {self.inputs!r}")
        if not self.sequences:
            raise DatasetError("sequences: the dataset is empty")
        if len(self.labels) != len(self.sequences):
            raise DatasetError(f"labels: {len(self.labels)} labels for "
                               f"{len(self.sequences)} sequences")
        n = len(self.sequences[0])
        if n == 0:
            raise DatasetError("sequences[0]: a sequence needs at least one token")
        for i, seq in enumerate(self.sequences):
            if len(seq) != n:
                raise DatasetError(f"sequences[{i}]: length {len(seq)}, expected n = {n} "
                                   f"(all sequences must have the same length)")
        if self.inputs == "token-ids":
            if self.vocab_size is None or self.vocab_size < 1:
                raise DatasetError("vocab_size: token-id datasets need a positive vocab_size")
            for i, seq in enumerate(self.sequences):
                for k, t in enumerate(seq):
                    if type(t) is not int or not 0 <= t < self.vocab_size:
                        raise DatasetError(f"sequences[{i}][{k}]: token {t!r} is not an id in "
                                           f"[0, {self.vocab_size})")
        else:
            if self.dim is None or self.dim < 1:
                raise DatasetError("dim: vector datasets need a positive dim")
            for i, seq in enumerate(self.sequences):
                for k, t in enumerate(seq):
                    if not isinstance(t, tuple) or len(t) != self.dim or \
                            not all(type(x) is Fraction for x in t):
                        raise DatasetError(f"sequences[{i}][{k}]: expected {self.dim} rationals")
        for i, y in enumerate(self.labels):
            if self.task == "next-token":
                _check_label(y, f"labels[{i}]")
            else:
                if not isinstance(y, tuple) or len(y) != n:
                    raise DatasetError(f"labels[{i}]: seq2seq needs a list of {n} labels")
                for k, yk in enumerate(y):
                    _check_label(yk, f"labels[{i}][{k}]")

    @property
    def N(self) -> int:  # noqa: N802 - the papers' name
        return len(self.sequences)

    @property
    def n(self) -> int:
        return len(self.sequences[0])

    @property
    def num_classes(self) -> int:
        """``max label + 1``."""
        if self.task == "next-token":
            return max(self.labels) + 1
        return max(max(y) for y in self.labels) + 1

    def position_labels(self, i: int) -> tuple[int, ...]:
        """Labels of sequence ``i`` at every read position (one for next-token)."""
        y = self.labels[i]
        return (y,) if self.task == "next-token" else y

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"format": DATASET_FORMAT, "task": self.task, "inputs": self.inputs}
        if self.inputs == "token-ids":
            obj["vocab_size"] = self.vocab_size
            obj["sequences"] = [list(s) for s in self.sequences]
        else:
            obj["dim"] = self.dim
            obj["sequences"] = [[[format_rational(x) for x in tok] for tok in s]
                                for s in self.sequences]
        obj["labels"] = [y if isinstance(y, int) else list(y) for y in self.labels]
        return obj

    def sha256(self) -> str:
        """SHA-256 of the canonical JSON text of the dataset (see docs/dataset-format.md)."""
        return hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()


def _check_label(y: object, where: str) -> None:
    if type(y) is not int or y < 0:
        raise DatasetError(f"{where}: labels are integers >= 0, found {y!r}")


def canonical_json(obj: object) -> str:
    """Canonical JSON text: sorted keys, no spaces, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def dataset_from_json(obj: object) -> Dataset:
    """Parse a decoded ``exactmem.dataset/1`` JSON object; errors name the field."""
    if not isinstance(obj, dict):
        raise DatasetError("top level: expected a JSON object")
    fmt = obj.get("format")
    if fmt != DATASET_FORMAT:
        raise DatasetError(f"format: expected {DATASET_FORMAT!r}, found {fmt!r}")
    for key in ("task", "inputs", "sequences", "labels"):
        if key not in obj:
            raise DatasetError(f"{key}: missing field")
    seqs_raw, labels_raw = obj["sequences"], obj["labels"]
    if not isinstance(seqs_raw, list) or not isinstance(labels_raw, list):
        raise DatasetError("sequences/labels: expected JSON lists")
    inputs = obj["inputs"]
    sequences: list[tuple[Any, ...]] = []
    if inputs == "vectors":
        dim = obj.get("dim")
        for i, s in enumerate(seqs_raw):
            if not isinstance(s, list):
                raise DatasetError(f"sequences[{i}]: expected a list of tokens")
            toks = []
            for k, tok in enumerate(s):
                if not isinstance(tok, list):
                    raise DatasetError(f"sequences[{i}][{k}]: a vector token is a list of numbers")
                try:
                    toks.append(tuple(to_rational(x, f"sequences[{i}][{k}][{j}]")
                                      for j, x in enumerate(tok)))
                except NotExactError as exc:
                    raise DatasetError(str(exc)) from exc
            sequences.append(tuple(toks))
        if dim is None and sequences and sequences[0]:
            dim = len(sequences[0][0])
        vocab = None
    else:
        for i, s in enumerate(seqs_raw):
            if not isinstance(s, list):
                raise DatasetError(f"sequences[{i}]: expected a list of token ids")
            for k, t in enumerate(s):
                if isinstance(t, float):
                    raise DatasetError(f"sequences[{i}][{k}]: found the float {t!r}; "
                                       f"token ids are integers")
            sequences.append(tuple(s))
        vocab, dim = obj.get("vocab_size"), None
    labels: list[Any] = []
    for i, y in enumerate(labels_raw):
        if isinstance(y, list):
            for k, yk in enumerate(y):
                if isinstance(yk, float):
                    raise DatasetError(f"labels[{i}][{k}]: found the float {yk!r}; labels are ints")
            labels.append(tuple(y))
        else:
            if isinstance(y, float):
                raise DatasetError(f"labels[{i}]: found the float {y!r}; labels are integers")
            labels.append(y)
    return Dataset(task=obj["task"], inputs=inputs, sequences=tuple(sequences),
                   labels=tuple(labels), vocab_size=vocab, dim=dim)


def load_dataset(path: str | Path) -> Dataset:
    """Read a dataset file; a missing or unreadable file is a :class:`DatasetError`."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise DatasetError(f"{p}: cannot read the dataset file ({exc.strerror})") from exc
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    return dataset_from_json(obj)


def save_dataset(ds: Dataset, path: str | Path) -> None:
    """Write ``ds`` atomically (a temporary file renamed into place)."""
    from exactmem.model.atomic import write_text_atomic

    write_text_atomic(Path(path), canonical_json(ds.to_json()) + "\n")
