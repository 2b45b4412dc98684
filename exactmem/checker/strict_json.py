"""The strict JSON text reader of the checker (standard library only): bytes on disk to
plain Python values.

The grammar is JSON with no duplicate keys, no NaN or Infinity, JSON floats kept as
:class:`JsonFloat` markers (never a valid value: the field readers name them), integers of
at most :data:`MAX_DIGITS` digits converted by halves (:func:`decimal`).  Resource limits
(:data:`MAX_FILE_BYTES` of text, gzip inflation at most :data:`MAX_INFLATION` times the file
or :data:`MIN_INFLATED` bytes, :data:`MAX_NODES` JSON values, the JSON reader's nesting
limit) are checked while the text is read, so every input gets an answer quickly, in bounded
memory.  Any deviation raises :class:`Unusable`.  The fields of a certificate are read from
these values by :mod:`.parse`.
"""

import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any, NoReturn, Protocol

from .verdict import Unusable

MAX_FILE_BYTES = 1 << 30  # a certificate or bound dataset file (after decompression)
MAX_DIGITS = 20000  # decimal digits of one integer, numerator or denominator
MAX_NODES = 1 << 25  # JSON values (containers and scalars) in one file
CHUNK = 1 << 20  # bytes read (or decompressed) at a time
MAX_INFLATION = 32  # a gzip file's text is at most this many times the file ...
MIN_INFLATED = 1 << 20  # ... or at most this many bytes, whichever is larger


class Reader(Protocol):
    """A binary file open for reading (a plain file, or a gzip stream over one)."""

    def read(self, size: int, /) -> bytes: ...

class JsonFloat:
    """A float literal met in the JSON text; never a valid value, kept to name its field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text



def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = {}
    for key, value in pairs:
        if key in out:
            raise Unusable(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _constant(name: str) -> NoReturn:
    raise Unusable(f"{name} is not a number this format allows")


def decimal(text: str) -> int:
    """A string of ASCII digits (optionally ``-``) of at most MAX_DIGITS digits -> int,
    by halves (no dependence on Python's integer-string limit)."""
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if text == "-0":
        raise Unusable("-0 is not a canonical number")
    if len(digits) > MAX_DIGITS:
        raise Unusable(f"a number of {len(digits)} digits exceeds the limit of {MAX_DIGITS}")

    def conv(d: str) -> int:
        if len(d) <= 4000:
            return int(d)
        h = len(d) // 2
        return conv(d[:-h]) * int(10 ** h) + conv(d[-h:])

    value = conv(digits)
    return -value if negative else value



def count_nodes(chunk: bytes | bytearray | str) -> int:
    """An upper bound on the JSON values that start in ``chunk`` (bytes or text): one per
    ``[`` not closed at once (a first element), ``,`` (a next one) and ``:`` (a member's
    value); the root is one more."""
    if isinstance(chunk, str):
        return chunk.count("[") - chunk.count("[]") + chunk.count(",") + chunk.count(":")
    return chunk.count(b"[") - chunk.count(b"[]") + chunk.count(b",") + chunk.count(b":")


def loads(text: str, max_nodes: int | None = None) -> Any:
    """Strict JSON text -> Python values (floats become :class:`JsonFloat` markers); at
    most ``max_nodes`` (MAX_NODES) values, counted before parsing."""
    most = MAX_NODES if max_nodes is None else max_nodes
    if 1 + count_nodes(text) > most:
        raise Unusable(f"more than {most} JSON values (the limit MAX_NODES)")
    return _parse(text)


def _parse(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_float=JsonFloat,
                          parse_int=decimal, parse_constant=_constant)
    except RecursionError:
        raise Unusable("JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise Unusable(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") \
            from None


def _chunks(fh: Reader, path: Path | str, cap: int, max_nodes: int,
            packed: int | None = None) -> bytearray:
    """The bytes of ``fh`` read CHUNK at a time; stops as soon as more than ``cap`` bytes or
    more than ``max_nodes`` JSON values (:func:`count_nodes`) have been seen, and, for a
    gzip file of ``packed`` bytes, as soon as the text passes ``MAX_INFLATION * packed``
    bytes and :data:`MIN_INFLATED`."""
    data, nodes = bytearray(), 1
    inflated = None if packed is None else max(MIN_INFLATED, MAX_INFLATION * packed)
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            return data
        data += chunk
        nodes += count_nodes(chunk)
        if len(data) > cap:
            raise Unusable(f"{path}: more than {cap} bytes of JSON text (the limit "
                           "MAX_FILE_BYTES, after decompression)")
        if inflated is not None and len(data) > inflated:
            raise Unusable(f"{path}: a gzip file of {packed} bytes inflating to more than "
                           f"{inflated} bytes (the limit: {MAX_INFLATION} times the file "
                           f"(MAX_INFLATION), at least {MIN_INFLATED} bytes (MIN_INFLATED))")
        if nodes > max_nodes:
            raise Unusable(f"{path}: more than {max_nodes} JSON values (the limit MAX_NODES)")


def read_json(path: Path | str, max_bytes: int | None = None,
              max_nodes: int | None = None) -> Any:
    """Read a JSON file: a regular file of at most ``max_bytes`` (MAX_FILE_BYTES) bytes and
    ``max_nodes`` (MAX_NODES) JSON values, UTF-8 without BOM, optionally gzip-compressed
    (recognised by its magic bytes; decompressed a chunk at a time, and both limits hold
    for the decompressed text, so a small file that inflates to much more stops early; a
    gzip file may inflate to at most :data:`MAX_INFLATION` times its size, or
    :data:`MIN_INFLATED` bytes, so the reading work is bounded by the file itself)."""
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    most = MAX_NODES if max_nodes is None else max_nodes
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise Unusable(f"{path}: not a regular file")
        if info.st_size > cap:
            raise Unusable(f"{path}: {info.st_size} bytes exceeds the limit of {cap} "
                           "(MAX_FILE_BYTES)")
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                fh.seek(0)
                try:
                    with gzip.GzipFile(fileobj=fh) as gz:
                        data = _chunks(gz, path, cap, most, info.st_size)
                except (OSError, EOFError, zlib.error) as exc:
                    raise Unusable(f"{path}: not a readable gzip file ({exc})") from None
            else:
                fh.seek(0)
                data = _chunks(fh, path, cap, most)
    except OSError as exc:
        raise Unusable(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unusable(f"{path}: not UTF-8 text (byte {exc.start})") from None
    del data
    if text.startswith("\ufeff"):
        raise Unusable(f"{path}: starts with a byte-order mark; JSON text has none")
    return _parse(text)
