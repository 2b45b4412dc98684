"""Datasets: N labelled sequences of length n (token ids or rational vectors).

The file format ``exactmem.dataset/1`` is documented in ``docs/dataset-format.md``.
Parsing is exact and strict, with the trusted checker's own reader (one grammar for both):
numbers are JSON integers or canonical ``"p/q"`` strings; a float, a duplicate key or an
unknown field is refused with the path of the offending field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from exactmem.arith import format_rational
from exactmem.checker.cert_dataset import dataset_object
from exactmem.checker.strict_json import read_json
from exactmem.checker.verdict import Unusable
from exactmem.errors import DatasetError

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
    # the recorded generator of generated data (docs/dataset-format.md, "Generated datasets")
    generator: dict[str, Any] | None = field(default=None, hash=False)
    # facts derived from the (immutable) sequences and labels, computed once
    # (exactmem.model.dataset_checks); not part of the dataset's value
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False,
                                 hash=False)

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

    def __repr__(self) -> str:
        size = f"vocab_size={self.vocab_size}" if self.inputs == "token-ids" else f"dim={self.dim}"
        return (f"Dataset({self.task}, {self.inputs}, N={self.N}, n={self.n}, {size}, "
                f"classes={self.num_classes})")

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

    def slice(self, lo: int, hi: int) -> Dataset:
        """The sequences ``lo .. hi - 1`` with their labels (a dataset of its own).  Its
        sequences and labels are this validated dataset's, so they are not checked again
        (an empty range is refused as an empty dataset is)."""
        sequences = self.sequences[lo:hi]
        if not sequences:
            raise DatasetError(f"slice {lo}:{hi}: no sequences (the dataset has {self.N})")
        part = object.__new__(Dataset)
        for f in dataclasses.fields(self):
            object.__setattr__(part, f.name, getattr(self, f.name))
        object.__setattr__(part, "sequences", sequences)
        object.__setattr__(part, "labels", self.labels[lo:hi])
        object.__setattr__(part, "generator", None)
        object.__setattr__(part, "memo", {})
        return part

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
        if self.generator is not None:
            obj["generator"] = dict(self.generator)
        return obj

    def sha256(self, as_json: dict[str, Any] | None = None) -> str:
        """SHA-256 of the canonical JSON text of the dataset (see docs/dataset-format.md);
        ``as_json``: its :meth:`to_json`, when the caller made it already."""
        obj = self.to_json() if as_json is None else as_json
        return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def _check_label(y: object, where: str) -> None:
    if type(y) is not int or y < 0:
        raise DatasetError(f"{where}: labels are integers >= 0, found {y!r}")


def canonical_json(obj: object) -> str:
    """Canonical JSON text: sorted keys, no spaces, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def dataset_from_json(obj: object) -> Dataset:
    """Parse a decoded ``exactmem.dataset/1`` object with the checker's strict grammar
    (docs/dataset-format.md), so the loader and the checker read datasets identically;
    errors name the field."""
    try:
        task, inputs, toks, labels, size, _ = dataset_object(obj, "dataset")
    except Unusable as exc:
        raise DatasetError(str(exc)) from None
    return Dataset(task=task, inputs=inputs,
                   sequences=tuple(tuple(s) for s in toks),
                   labels=tuple(y if task == "next-token" else tuple(y) for y in labels),
                   vocab_size=size if inputs == "token-ids" else None,
                   dim=size if inputs == "vectors" else None,
                   generator=obj.get("generator") if isinstance(obj, dict) else None)


def load_dataset(path: str | Path) -> Dataset:
    """Read a dataset file (a regular UTF-8 JSON file under the size limit, strict grammar);
    anything else is a :class:`DatasetError` naming the file and the field."""
    try:
        obj = read_json(Path(path))
    except Unusable as exc:
        raise DatasetError(str(exc)) from None
    return dataset_from_json(obj)


def save_dataset(ds: Dataset, path: str | Path) -> None:
    """Write ``ds`` atomically (a temporary file renamed into place)."""
    from exactmem.files.atomic import write_text_atomic

    write_text_atomic(Path(path), canonical_json(ds.to_json()) + "\n")
