"""A language-model certificate's bound weights file: safetensors read with the standard
library (docs/trained-models.md, "Bound weights"; docs/checker.md).

``model.weights = {"path", "bytes", "sha256", "tensors"}`` binds one safetensors file: its
path relative to the certificate (inside its folder: no absolute path, no ``..``, no link
leading out), its length, its SHA-256 (64 lowercase hex digits) and, per certificate tensor
name, the name of the tensor in the file.  :func:`load` reads the whole file once, hashing
it as it reads, and parses nothing before the length and the hash match: a present file
that differs from the binding is a failure (the verdict ``s REJECTED``, naming the file); a
missing or unreadable one is :class:`Unusable`.  Then the header is read under limits
checked before it is parsed: the declared header length at most :data:`MAX_HEADER_BYTES`
and inside the file, strict JSON (no duplicate keys), ``__metadata__`` an object of
strings, every tensor ``{"dtype", "shape", "data_offsets"}`` with a safetensors dtype, at
most :data:`MAX_RANK` dimensions, offsets inside the data, ``end - begin`` equal to the
dtype's size times the shape's product, and the tensors tiling the data (no overlap, no
gap).  A tensor the certificate uses must have the shape the model header gives it and a
float dtype (little-endian ``F64``, ``F32``, ``F16``, ``BF16``); each value becomes the
dyadic rational it is, decoded from its bits with integers (no binary float is formed),
and the tensor the ``(rows of numerators, least scale)`` form of :func:`lm_model.tensor`;
NaN and infinities are refused naming the tensor and index.
"""

import hashlib
import os
import re
import stat
import struct
from collections.abc import Mapping, Sequence
from functools import reduce
from operator import or_
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..parse import integer, kind_of, obj, typed
from ..strict_json import CHUNK, loads
from ..verdict import Unusable
from . import lm_fastweights
from .lm_fastweights import index
from .lm_model import MAX_SCALE, MAX_VALUE_BITS

MAX_WEIGHTS_BYTES = 1 << 34  # a bound weights file (16 GiB), read into memory once
MAX_HEADER_BYTES = 100_000_000  # the safetensors header (the safetensors library's limit)
MAX_RANK = 8  # dimensions of one tensor of the file
MAX_NAME = 1024  # characters of a path or tensor name
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FLOATS = ("F64", "F32", "F16", "BF16")  # the dtypes a certificate's tensor may have
LAYOUTS = {"F64": (11, 52), "F32": (8, 23), "F16": (5, 10), "BF16": (8, 7)}  # exponent and
# significand bits (IEEE 754 binary64, binary32, binary16; bfloat16: binary32's upper half)
CODES = {8: "Q", 4: "I", 2: "H"}  # struct codes of unsigned little-endian words
_HEX = re.compile(r"[0-9a-f]{64}")

Exact = tuple[list[list[int]], int]  # rows of integer numerators over 2**scale


class Bound:
    """A weights file whose length and SHA-256 matched its binding: its bytes, its
    header's tensors ``name -> (dtype, shape, begin, end)`` (absolute offsets) and the
    certificate's map from its tensor names to the file's."""

    def __init__(self, name: str, data: bytearray, entries: dict[str, tuple[str, list[int],
                 int, int]], names: dict[str, str]) -> None:
        self.name, self.data, self.entries, self.names = name, data, entries, names

    def raw(self, name: str) -> tuple[str, list[int], memoryview]:
        """``(dtype, shape, bytes)`` of the file's tensor for the certificate's ``name``."""
        dtype, shape, begin, end = self.entries[self.names[name]]
        return dtype, shape, memoryview(self.data)[begin:end]

    def tensors(self, required: Sequence[str], optional: Sequence[str],
                shapes: Mapping[str, list[int]], fast: bool = False) -> dict[str, Exact]:
        """Every tensor the certificate names (``required`` all, ``optional`` any), each
        checked against its shape in ``shapes`` and read exactly; ``fast``: decoded in bulk
        (:mod:`lm_fastweights`, the same integers) when that path is available."""
        obj(self.names, "model.weights.tensors", required, optional)
        out = {}
        for key, name in self.names.items():
            where = f"weights file {self.name}: tensor {name[:200]!r} (model.weights.tensors.{key})"
            if name not in self.entries:
                raise Unusable(f"{where}: not a tensor of the file")
            dtype, shape, _, _ = self.entries[name]
            if shape != shapes[key]:
                raise Unusable(f"{where}: shape {shape}, expected {shapes[key]}")
            if dtype not in FLOATS:
                raise Unusable(f"{where}: dtype {dtype} is not read (the checker reads "
                               f"{', '.join(FLOATS)})")
            raw = self.raw(key)[2]
            if fast and lm_fastweights.available():
                ebits, mbits = LAYOUTS[dtype]
                out[key] = lm_fastweights.exact(raw, ebits, mbits, SIZES[dtype], where, shape,
                                                MAX_SCALE, MAX_VALUE_BITS)
            else:
                out[key] = exact(raw, dtype, shape, where)
        return out


def load(value: Any, base: Path | str, override: Path | str | None = None) -> Bound | str:
    """The file bound by ``model.weights`` (``value``), beside the certificate in ``base``
    or ``override`` when given; a failure text when its length or hash differ."""
    obj(value, "model.weights", ("path", "bytes", "sha256", "tensors"))
    name = typed(value["path"], str, "model.weights.path")
    size = integer(value["bytes"], "model.weights.bytes", 8, MAX_WEIGHTS_BYTES)
    digest = typed(value["sha256"], str, "model.weights.sha256")
    if not _HEX.fullmatch(digest):
        raise Unusable("model.weights.sha256: expected 64 lowercase hexadecimal digits")
    names = typed(value["tensors"], dict, "model.weights.tensors")
    for key, v in names.items():
        if type(v) is not str or not 0 < len(v) <= MAX_NAME:
            raise Unusable(f"model.weights.tensors.{key[:200]}: expected a tensor name of the file "
                           f"(1 to {MAX_NAME} characters), found {kind_of(v)}")
    path = beside(base, name) if override is None else Path(override)
    data = read(path, size, digest)
    if isinstance(data, str):
        return data
    return Bound(str(path), data, header(data, str(path)), names)


def beside(base: Path | str, name: str) -> Path:
    """``model.weights.path`` in the folder ``base``: a relative path that resolves
    (symbolic links followed) inside ``base``, never outside it."""
    rule = ("model.weights.path: a bound weights file is a relative path inside the "
            "certificate's folder (no absolute path, no '..', no link leading outside)")
    if not name or len(name) > MAX_NAME or "\x00" in name or "\\" in name or \
            PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or \
            PureWindowsPath(name).drive or ".." in PurePosixPath(name).parts:
        raise Unusable(f"{rule}; found {name[:200]!r}")
    folder = os.path.realpath(base)
    target = os.path.realpath(os.path.join(folder, name))
    if os.path.commonpath([folder, target]) != folder or target == folder:
        raise Unusable(f"{rule}; {name[:200]!r} resolves to {target[:200]}")
    return Path(target)


def read(path: Path, size: int, digest: str) -> bytearray | str:
    """The bytes of ``path`` when it has ``size`` bytes hashing to ``digest``; else the
    failure text.  Missing, not a regular file, unreadable: :class:`Unusable`."""
    changed = (f"model.weights: the weights file {path} is not the file the certificate "
               "binds")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise Unusable(f"model.weights: the weights file {path} is not a regular file")
        with open(path, "rb") as fh:
            found = os.fstat(fh.fileno()).st_size
            if found != size:
                return f"{changed} ({found} bytes, the certificate binds {size})"
            data, h = bytearray(), hashlib.sha256()
            while len(data) <= size:
                chunk = fh.read(CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                data += chunk
    except OSError as exc:
        raise Unusable(f"model.weights: cannot read the weights file {path} "
                       f"({exc.strerror or exc})") from None
    if len(data) != size:
        return f"{changed} ({len(data)} bytes read, the certificate binds {size})"
    if h.hexdigest() != digest:
        return f"{changed} (its SHA-256 is {h.hexdigest()}, the certificate binds {digest})"
    return data


def header(data: bytearray, name: str) -> dict[str, tuple[str, list[int], int, int]]:
    """The tensors of the safetensors file ``data`` (hash already checked): ``name ->
    (dtype, shape, begin, end)`` with absolute offsets, every limit checked."""
    where = f"weights file {name}"
    n = int.from_bytes(data[:8], "little")
    if n > MAX_HEADER_BYTES:
        raise Unusable(f"{where}: a header of {n} bytes declared, more than the limit of "
                       f"{MAX_HEADER_BYTES} (MAX_HEADER_BYTES)")
    if 8 + n > len(data):
        raise Unusable(f"{where}: a header of {n} bytes declared, past the end of the file "
                       f"of {len(data)} bytes")
    try:
        text = bytes(data[8:8 + n]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unusable(f"{where}: the header is not UTF-8 (byte {8 + exc.start})") from None
    try:
        head = loads(text)
    except Unusable as exc:
        raise Unusable(f"{where}: header: {exc}") from None
    if type(head) is not dict:
        raise Unusable(f"{where}: header: expected a JSON object, found {kind_of(head)}")
    meta = head.get("__metadata__", {})
    if type(meta) is not dict or any(type(v) is not str for v in meta.values()):
        raise Unusable(f"{where}: __metadata__: expected an object of strings")
    start, end = 8 + n, len(data)
    entries, spans = {}, []
    for key, e in head.items():
        if key == "__metadata__":
            continue
        at = f"{where}: tensor {key[:200]!r}"
        obj(e, at, ("dtype", "shape", "data_offsets"))
        dtype = e["dtype"]
        if type(dtype) is not str or dtype not in SIZES:
            found = repr(dtype[:40]) if type(dtype) is str else kind_of(dtype)
            raise Unusable(f"{at}.dtype: {found} is not a safetensors dtype "
                           f"({', '.join(SIZES)})")
        shape = typed(e["shape"], list, f"{at}.shape")
        if len(shape) > MAX_RANK:
            raise Unusable(f"{at}.shape: {len(shape)} dimensions, more than {MAX_RANK}")
        count = 1
        for k, d in enumerate(shape):
            count *= integer(d, f"{at}.shape[{k}]", 0, end)
        offs = typed(e["data_offsets"], list, f"{at}.data_offsets")
        if len(offs) != 2:
            raise Unusable(f"{at}.data_offsets: expected [begin, end]")
        lo = integer(offs[0], f"{at}.data_offsets[0]", 0, end - start)
        hi = integer(offs[1], f"{at}.data_offsets[1]", lo, end - start)
        if hi - lo != count * SIZES[dtype]:
            raise Unusable(f"{at}: {hi - lo} bytes of data, but {dtype} of shape {shape} "
                           f"takes {count * SIZES[dtype]}")
        entries[key] = (dtype, shape, start + lo, start + hi)
        spans.append((lo, hi, key))
    reached, last = 0, ""
    for lo, hi, key in sorted(spans):
        if lo < reached:
            raise Unusable(f"{where}: tensors {last[:200]!r} and {key[:200]!r} overlap "
                           f"(bytes {lo} to {reached} of the data)")
        if lo > reached:
            raise Unusable(f"{where}: bytes {reached} to {lo} of the data belong to no tensor")
        reached, last = hi, key
    if reached != end - start:
        raise Unusable(f"{where}: bytes {reached} to {end - start} of the data belong to no "
                       "tensor")
    return entries


def exact(raw: memoryview, dtype: str, shape: list[int], where: str) -> Exact:
    """The tensor as rows of integer numerators over ``2**scale``, the scale the least
    that is exact (:func:`lm_model.tensor`'s form).  Each value is decoded from its bits
    with integers (:data:`LAYOUTS`): sign, biased exponent, significand (with the hidden
    bit when the exponent is not 0, else a subnormal's); an exponent of all ones (an
    infinity or NaN) is refused."""
    ebits, mbits = LAYOUTS[dtype]
    size = SIZES[dtype]
    top, emask, low = ebits + mbits, (1 << ebits) - 1, (1 << mbits) - 1
    words = struct.unpack(f"<{len(raw) // size}{CODES[size]}", raw)
    exps = [(b >> mbits) & emask for b in words]
    if emask in exps:
        k = exps.index(emask)
        raise Unusable(f"{where}: {'NaN' if words[k] & low else 'an infinity'} at index "
                       f"{index(k, shape)}")
    # value = significand * 2**(max(exponent, 1) - bias), all at the least exponent lo
    lo = min(filter(None, exps), default=1)
    if 0 in exps and any(b & low for b, x in zip(words, exps) if not x):
        lo = 1  # a subnormal
    nums = [((b & low) | (low + 1)) << (x - lo) if x else b & low  # 0 unless lo is 1
            for b, x in zip(words, exps)]
    e = (1 << (ebits - 1)) - 1 + mbits - lo  # every |value| is nums[k] / 2**e
    every = reduce(or_, nums, 0)
    shift = min((every & -every).bit_length() - 1, e) if every else e  # the least scale
    if shift < 0:  # every value an integer
        nums, e = [-(p << -e) if b >> top else p << -e for p, b in zip(nums, words)], 0
    else:
        nums, e = [-(p >> shift) if b >> top else p >> shift for p, b in zip(nums, words)], \
            e - shift
    if e > MAX_SCALE:
        raise Unusable(f"{where}: a scale of {e} bits exceeds the limit of {MAX_SCALE}")
    if max(map(int.bit_length, nums), default=0) > MAX_VALUE_BITS:
        k = next(k for k, p in enumerate(nums) if p.bit_length() > MAX_VALUE_BITS)
        raise Unusable(f"{where}: at index {index(k, shape)} a numerator of "
                       f"{nums[k].bit_length()} bits exceeds the limit of {MAX_VALUE_BITS} "
                       "bits (MAX_VALUE_BITS)")
    cols = (shape[1] if len(shape) == 2 else len(nums)) or 1
    return [nums[i:i + cols] for i in range(0, len(nums), cols)], e
