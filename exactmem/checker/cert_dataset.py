"""Reading the dataset a certificate embeds or binds (standard library only), with the
strict grammar of docs/dataset-format.md; the producer's loader reads datasets with it too.
"""

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from fractions import Fraction
from itertools import chain
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NoReturn

from .parse import choice, integer, kind_of, lcm, number, obj, ratio
from .strict_json import JsonFloat, read_json
from .verdict import Unusable

DATASET_FORMAT = "exactmem.dataset/1"


# (task, inputs, tokens, labels, size, sha256) of a dataset read strictly
Dataset = tuple[Any, Any, list[Any], list[Any], int, str]

def _refuse(value: Any) -> NoReturn:
    if isinstance(value, JsonFloat):
        raise Unusable(f"the JSON float {value.text}; numbers are integers or 'p/q' strings")
    raise Unusable(f"a value of type {type(value).__name__} has no JSON form")


def canonical(value: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces, ASCII; a float anywhere is unusable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=_refuse)


def dataset(entry: Any, base: Path | str) -> Dataset:
    """The dataset (embedded, or a bound regular file), read strictly; returns
    ``(task, inputs, tokens, labels, size, sha256)``."""
    return dataset_object(*dataset_source(entry, base))


def dataset_source(entry: Any, base: Path | str) -> tuple[Any, str]:
    """The decoded dataset object a certificate's ``dataset`` entry embeds or binds, and
    where it is from (for messages)."""
    obj(entry, "dataset", ("sha256",), ("data", "path"))
    if ("data" in entry) == ("path" in entry):
        raise Unusable("dataset: exactly one of 'data' (embedded) and 'path' (bound file)")
    if "data" in entry:
        data, where = entry["data"], "dataset.data"
    else:
        if type(entry["path"]) is not str or not entry["path"]:
            raise Unusable("dataset.path: expected a file name relative to the certificate")
        data = read_json(inside(base, entry["path"]))
        where = f"dataset file {entry['path']}"
    return data, where


def inside(base: Path | str, name: str) -> Path:
    """The bound dataset file ``name`` of a certificate in the folder ``base``: a relative
    path that resolves (symbolic links followed) inside ``base``, never outside it."""
    rule = ("dataset.path: a bound dataset is a relative path inside the certificate's "
            "folder (no absolute path, no '..', no link leading outside)")
    if "\x00" in name or "\\" in name or PurePosixPath(name).is_absolute() or \
            PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive or \
            ".." in PurePosixPath(name).parts:
        raise Unusable(f"{rule}; found {name[:200]!r}")
    folder = os.path.realpath(base)
    target = os.path.realpath(os.path.join(folder, name))
    if os.path.commonpath([folder, target]) != folder or target == folder:
        raise Unusable(f"{rule}; {name[:200]!r} resolves to {target[:200]}")
    return Path(target)


def dataset_object(data: Any, where: str = "dataset") -> Dataset:
    """A decoded dataset object, read strictly (docs/dataset-format.md); returns
    ``(task, inputs, tokens, labels, size, sha256)`` with vector tokens as Fraction tuples
    and ``size`` the vocabulary size or the dimension."""
    if type(data) is not dict or data.get("format") != DATASET_FORMAT:
        raise Unusable(f"{where}.format: expected {DATASET_FORMAT!r}")
    inputs = obj(data, where, ("format", "task", "inputs", "sequences", "labels"),
                 ("vocab_size", "dim", "generator"))["inputs"]
    size_key = {"token-ids": "vocab_size", "vectors": "dim"}.get(inputs) \
        if type(inputs) is str else None
    if size_key is None:
        raise Unusable(f"{where}.inputs: expected 'token-ids' or 'vectors', found {inputs!r}")
    obj(data, where, ("format", "task", "inputs", "sequences", "labels", size_key),
        ("generator",))
    task = choice(data["task"], ("next-token", "seq2seq"), f"{where}.task")
    size = integer(data[size_key], f"{where}.{size_key}", 1)
    seqs, labels = data["sequences"], data["labels"]
    if type(seqs) is not list or not seqs or type(labels) is not list:
        raise Unusable(f"{where}: needs a non-empty list of sequences and a list of labels")
    if len(labels) != len(seqs):
        raise Unusable(f"{where}.labels: {len(labels)} labels for {len(seqs)} sequences")
    n = len(seqs[0]) if type(seqs[0]) is list else 0
    norm_seqs, toks = [], []
    for i, s in enumerate(seqs):
        if type(s) is not list or len(s) != n or n == 0:
            found = f"length {len(s)}" if type(s) is list else f"found {kind_of(s)}"
            raise Unusable(f"{where}.sequences[{i}]: {found}, expected a list of n = "
                           f"{n or '>= 1'} tokens (all sequences of one length)")
        if inputs == "token-ids":  # the tokens are checked together below
            norm_seqs.append(s)
            toks.append(s)
            continue
        row, text = [], []
        for k, t in enumerate(s):
            if type(t) is not list or len(t) != size:
                raise Unusable(f"{where}.sequences[{i}][{k}]: expected {number(size)} numbers")
            vals = []
            for j, x in enumerate(t):
                w = f"{where}.sequences[{i}][{k}][{j}]"
                vals.append(Fraction(*ratio(x, w)))
            row.append(tuple(vals))
            text.append(t)
        toks.append(row)
        norm_seqs.append(text)
    if inputs == "token-ids" and not _ints_in(chain.from_iterable(seqs), 0, size - 1):
        for i, s in enumerate(seqs):  # which one
            for k, t in enumerate(s):
                integer(t, f"{where}.sequences[{i}][{k}]", 0, size - 1)
    if task == "next-token":
        labels_ok = _ints_in(labels, 0)
    else:
        labels_ok = all(type(y) is list and len(y) == n for y in labels) and _ints_in(
            chain.from_iterable(labels), 0)
    for i, y in enumerate([] if labels_ok else labels):  # which one
        ys = [y] if task == "next-token" else y
        if type(ys) is not list or len(ys) != (1 if task == "next-token" else n):
            raise Unusable(f"{where}.labels[{i}]: seq2seq needs a list of {n} labels")
        for k, v in enumerate(ys):
            integer(v, f"{where}.labels[{i}]" + ("" if task == "next-token" else f"[{k}]"), 0)
    norm = {"format": DATASET_FORMAT, "task": task, "inputs": inputs, size_key: size,
            "sequences": norm_seqs, "labels": labels}
    if "generator" in data:
        norm["generator"] = generator(data["generator"], f"{where}.generator",
                                      (task, inputs))
    digest = hashlib.sha256(canonical(norm).encode()).hexdigest()
    return task, inputs, toks, labels, size, digest


def _ints_in(values: Iterable[Any], lo: int, hi: int | None = None) -> bool:
    """Every value is an ``int`` (not a ``bool``) in ``[lo, hi]`` (``hi`` ``None``: no upper
    bound; an empty list: true); the per-value checks then need not run."""
    vals = list(values)
    if not vals:
        return True
    if set(map(type, vals)) != {int}:
        return False
    return min(vals) >= lo and (hi is None or max(vals) <= hi)


GENERATORS = ("exactmem.uniform-tokens/1",)  # checker/lm/lm_uniform.py regenerates them


def generator(value: Any, where: str, kind: tuple[str, str]) -> dict[str, Any]:
    """``generator``: the recorded generator of a seq2seq token-id dataset (its ``name``,
    ``seed`` below ``2**64``, ``vocab`` below ``2**32``, ``sequences`` and ``length`` (tokens
    a row, inputs and the last label)); its semantics are checked by the claim that uses
    it."""
    if kind != ("seq2seq", "token-ids"):
        raise Unusable(f"{where}: only a seq2seq token-id dataset records a generator")
    obj(value, where, ("name", "seed", "vocab", "sequences", "length"))
    choice(value["name"], GENERATORS, f"{where}.name")
    integer(value["seed"], f"{where}.seed", 0, (1 << 64) - 1)
    integer(value["vocab"], f"{where}.vocab", 1, 1 << 32)
    integer(value["sequences"], f"{where}.sequences", 1)
    integer(value["length"], f"{where}.length", 2)
    checked: dict[str, Any] = value
    return checked


def initial(net: dict[str, Any], toks: Sequence[Any], layers: Sequence[dict[str, Any]]
            ) -> tuple[list[tuple[int, ...]], int, list[list[int]]]:
    """Distinct input columns, their denominator, and the column index of every position
    (token ids: the embedding table's columns, indexed by the ids)."""
    if net["kind"] == "token-ids":
        rows, den = layers[0]["table"]
        if layers[0]["positions"] is None:
            return list(zip(*rows)), den, [list(s) for s in toks]
        prows, pden = layers[0]["positions"]  # column (t, k) = table[:, t] + positions[:, k]
        m = lcm(den, pden, "the input columns")
        fa, fb = m // den, m // pden
        ids: dict[tuple[int, int], int] = {}
        out: list[tuple[int, ...]] = []
        index: list[list[int]] = []
        for s in toks:
            row = []
            for k, t in enumerate(s):
                j = ids.get((t, k))
                if j is None:
                    j = ids[(t, k)] = len(out)
                    out.append(tuple(r[t] * fa + p[k] * fb for r, p in zip(rows, prows)))
                row.append(j)
            index.append(row)
        return out, m, index
    table: dict[Any, int] = {}
    cols: list[tuple[int, ...]] = []
    index, den = [], 1
    for q in {x.denominator for s in toks for t in s for x in t}:
        den = lcm(den, q, "the input columns")
    for s in toks:
        row = []
        for t in s:
            j = table.get(t)
            if j is None:
                j = table[t] = len(cols)
                cols.append(tuple(x.numerator * (den // x.denominator) for x in t))
            row.append(j)
        index.append(row)
    return cols, den, index
