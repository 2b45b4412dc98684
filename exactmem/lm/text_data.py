"""Text in, text out for extraction (docs/extraction.md, "Data"): sequences of token ids
from a text file, JSON lines, an ``.npy`` array or an ``exactmem.dataset/1`` file, tokenized
with the checkpoint's own tokenizer or character by character, and decoded back to text.

Vocabularies (:func:`vocabulary`), in this order:

- ``chars=True``: character level, the sorted set of the characters of DATA (as nanoGPT's
  ``shakespeare_char/prepare.py`` builds it; right only when DATA has the training text's
  characters);
- ``vocab``: a JSON file (a list of strings, the string of each id; or an object string ->
  id), or a nanoGPT ``meta.pkl``, read with an unpickler that builds only dicts, lists,
  strings and integers (every class or function reference is refused, so no code runs):
  its ``stoi``/``itos`` character maps;
- otherwise the model directory's ``tokenizer.json`` (the ``tokenizers`` package), or
  ``transformers.AutoTokenizer`` when the directory has other tokenizer files; a ``meta.pkl``
  beside a nanoGPT checkpoint file is read as above.

Sources (:func:`read_sequences`): ``.npy`` (integers ``[N, L]``, never pickles); ``.jsonl``
(one object a line: ``"text"`` or ``"tokens"``, optional ``"count"``, the number of times
the sequence occurs in the training data); ``.json`` (an ``exactmem.dataset/1`` next-token
dataset, each sequence its tokens followed by its last label); any other file: one sequence a
line, text when a vocabulary is known, else token ids separated by white space.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import DatasetError

MAX_META_BYTES = 1 << 24


@dataclass(frozen=True)
class Vocabulary:
    """How text becomes token ids and back: ``encode(text)`` and ``decode(ids)``;
    ``source`` says where it came from."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    source: str


@dataclass(frozen=True)
class Sequences:
    """Token ids ``[N, L]`` (every record cut to ``L``), the duplication counts when the
    source gives them, and the vocabulary when one is known."""

    tokens: np.ndarray
    counts: tuple[int, ...] | None
    vocabulary: Vocabulary | None
    skipped: int = 0  # records shorter than L


class _DataOnly(pickle.Unpickler):
    """Builds only the pickle's own data (dicts, lists, tuples, strings, numbers): any
    class or function reference, the only way a pickle runs code, is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}; only dicts, strings and "
                                     "integers are read")


def read_meta(path: Path) -> Vocabulary:
    """A nanoGPT ``meta.pkl`` (``{"vocab_size", "stoi", "itos"}``), read without running
    code (:class:`_DataOnly`); anything else is refused with the alternatives named."""
    alt = "pass --chars, or --vocab with a JSON list of the characters by id"
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_META_BYTES:
            raise DatasetError(f"{path}: larger than {MAX_META_BYTES} bytes")
        meta = _DataOnly(io.BytesIO(raw)).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError) as exc:
        raise DatasetError(f"{path}: not read as a nanoGPT meta.pkl ({exc}); {alt}") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or not all(type(k) is int and type(v) is str
                                             for k, v in itos.items()):
        raise DatasetError(f"{path}: expected a dict with 'itos' (int -> str); {alt}")
    return _table([itos[i] for i in sorted(itos)], f"nanoGPT meta.pkl {path}")


def _table(strings: list[str], source: str) -> Vocabulary:
    """Character-level vocabulary: id ``i`` is ``strings[i]`` (one character each)."""
    if any(len(s) != 1 for s in strings):
        raise DatasetError(f"{source}: a character vocabulary has one character per id")
    stoi = {s: i for i, s in enumerate(strings)}
    if len(stoi) != len(strings):
        raise DatasetError(f"{source}: a character appears twice")

    def encode(text: str) -> list[int]:
        missing = sorted({c for c in text if c not in stoi})
        if missing:
            raise DatasetError(f"characters {missing[:5]!r} are not in the vocabulary "
                               f"({source})")
        return [stoi[c] for c in text]

    return Vocabulary(encode, lambda ids: "".join(strings[i] for i in ids), source)


def read_json_vocab(path: Path) -> Vocabulary:
    """A JSON vocabulary: a list of strings (by id) or an object string -> id."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot read a JSON vocabulary: {exc}") from None
    if isinstance(obj, dict) and all(type(v) is int for v in obj.values()):
        obj = [s for s, _ in sorted(obj.items(), key=lambda kv: kv[1])]
    if not isinstance(obj, list) or not all(type(s) is str for s in obj):
        raise DatasetError(f"{path}: expected a list of strings or an object string -> id")
    return _table(obj, f"vocabulary {path}")


def model_tokenizer(model: Path) -> Vocabulary | None:
    """The checkpoint's own tokenizer, if it has one (see the module docstring)."""
    folder = model if model.is_dir() else model.parent
    if not model.is_dir() and (folder / "meta.pkl").is_file():
        return read_meta(folder / "meta.pkl")
    if not model.is_dir():
        return None
    if (folder / "tokenizer.json").is_file():
        from exactmem.optional import require

        tokenizers = require("tokenizers", "reading tokenizer.json", "trained")
        tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        return Vocabulary(lambda s: list(tok.encode(s).ids), lambda ids: tok.decode(ids),
                          f"{folder / 'tokenizer.json'}")
    if any((folder / f).is_file() for f in ("vocab.json", "tokenizer_config.json",
                                            "tokenizer.model")):
        from exactmem.optional import require

        transformers = require("transformers", "reading the model's tokenizer", "trained")
        auto = transformers.AutoTokenizer.from_pretrained(str(folder))
        return Vocabulary(lambda s: list(auto.encode(s)), lambda ids: str(auto.decode(ids)),
                          f"transformers.AutoTokenizer({folder})")
    return None


def _records(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSON lines file."""
    out = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{path}:{no}: not JSON: {exc}") from None
        if not isinstance(rec, dict) or ("text" in rec) == ("tokens" in rec):
            raise DatasetError(f"{path}:{no}: expected an object with 'text' or 'tokens'")
        count = rec.get("count", 1)
        if type(count) is not int or count < 1:
            raise DatasetError(f"{path}:{no}: count: expected an integer >= 1")
        out.append(rec)
    return out


def vocabulary(data: Path, model: Path, chars: bool, vocab: Path | None) -> Vocabulary | None:
    """The vocabulary (module docstring, in its order), or ``None``."""
    if chars:
        if data.suffix in (".npy", ".json"):
            raise DatasetError(f"--chars: {data} holds token ids, not text")
        text = data.read_text(encoding="utf-8")
        if data.suffix == ".jsonl":
            text = "".join(r.get("text", "") for r in _records(data))
        else:
            text = text.replace("\n", "")
        return _table(sorted(set(text)), f"the characters of {data}")
    if vocab is not None:
        _regular(vocab)
        return read_meta(vocab) if vocab.suffix == ".pkl" else read_json_vocab(vocab)
    return model_tokenizer(model)


MAX_DATA_BYTES = 1 << 30  # the largest data file read (its whole text is held at once)


def _regular(path: Path) -> Path:
    """``path`` when it is a regular file of at most :data:`MAX_DATA_BYTES` (never a device,
    a pipe or a folder, which could be read without end)."""
    if not path.is_file():
        raise DatasetError(f"{path}: not a regular file" if path.exists() else
                           f"{path}: no such file")
    if path.stat().st_size > MAX_DATA_BYTES:
        raise DatasetError(f"{path}: larger than {MAX_DATA_BYTES} bytes (MAX_DATA_BYTES)")
    return path


def read_sequences(data: str | Path, length: int, model: str | Path, chars: bool = False,
                   vocab: str | Path | None = None) -> Sequences:
    """The first ``length`` tokens of every record of ``data`` (module docstring); a record
    with fewer tokens is skipped (counted in ``skipped``)."""
    data, model = _regular(Path(data)), Path(model)
    voc = vocabulary(data, model, chars, None if vocab is None else Path(vocab))
    counts: list[int] | None = None
    if data.suffix == ".npy":
        try:
            rows = [list(r) for r in np.load(data, allow_pickle=False)]
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{data}: cannot read an integer array: {exc}") from None
    elif data.suffix == ".jsonl":
        recs = _records(data)
        if any("text" in r for r in recs) and voc is None:
            raise DatasetError(f"{data}: 'text' records need a tokenizer: the model has "
                               "none; pass --chars or --vocab")
        rows = [voc.encode(r["text"]) if "text" in r and voc is not None else r["tokens"]
                for r in recs]
        counts = [r.get("count", 1) for r in recs]
    elif data.suffix == ".json":
        from exactmem.model.dataset import load_dataset

        ds = load_dataset(data)
        if ds.task != "seq2seq" or any(list(y[:-1]) != list(x[1:])
                                       for x, y in zip(ds.sequences, ds.labels, strict=True)):
            raise DatasetError(f"{data}: expected a next-token dataset (seq2seq, label p = "
                               "token p + 1)")
        rows = [[*x, y[-1]] for x, y in zip(ds.sequences, ds.labels, strict=True)]
    else:
        lines = [ln for ln in data.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if voc is not None:
            rows = [voc.encode(ln) for ln in lines]
        else:
            try:
                rows = [[int(t) for t in ln.split()] for ln in lines]
            except ValueError:
                raise DatasetError(f"{data}: a line is not token ids and no tokenizer is "
                                   "known; pass --chars or --vocab") from None
    keep = [i for i, r in enumerate(rows) if len(r) >= length]
    if not keep:
        raise DatasetError(f"{data}: no sequence has prefix + suffix = {length} tokens")
    try:
        arr = np.array([[int(t) for t in rows[i][:length]] for i in keep], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{data}: a token is not an integer: {exc}") from None
    return Sequences(arr, None if counts is None else tuple(counts[i] for i in keep), voc,
                     len(rows) - len(keep))
