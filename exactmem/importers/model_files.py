"""Model files read as arrays: a PyTorch ``state_dict`` file (``torch.load(...,
weights_only=True)``) or a safetensors file (the ``safetensors`` package's numpy API;
bfloat16 tensors decoded from their bits, exactly), each with a message naming the file or
tensor when it cannot be read.  The arrays become an exact network in
:mod:`exactmem.importers.import_model`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import NotExactError, SpecError
from exactmem.optional import require

METADATA_KEY = "exactmem.skeleton"
SAFETENSORS_SUFFIXES = (".safetensors", ".st")
FLOAT_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def load_torch_state(path: Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``: a dict of tensors (and ``_extra_state``)."""
    torch = require("torch", "reading a PyTorch file")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds (pickle, zip, RuntimeError)
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
        raise SpecError(f"cannot read {path} as a PyTorch state dict (a file written by "
                        f"torch.save): {why}") from None
    if not isinstance(state, Mapping):
        raise SpecError(f"{path}: expected a state dict (a mapping of tensor names to "
                        f"tensors), found {type(state).__name__}")
    return dict(state)


def _safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < size <= 100_000_000:
                raise ValueError("no safetensors header")
            header = json.loads(fh.read(size))
    except (OSError, ValueError, struct.error) as exc:
        raise SpecError(f"cannot read {path} as a safetensors file: {exc}") from None
    if not isinstance(header, dict):
        raise SpecError(f"{path}: the safetensors header is not an object")
    return header, 8 + size


def load_safetensors_state(path: Path) -> tuple[dict[str, Any], str | None]:
    """The arrays of a safetensors file (float dtypes only) and its skeleton metadata."""
    header, start = _safetensors_header(path)
    meta = header.get("__metadata__") or {}
    arrays: dict[str, Any] = {}
    bf16: dict[str, Any] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        code = entry.get("dtype") if isinstance(entry, dict) else None
        if code not in FLOAT_CODES:
            raise NotExactError(f"{name}: expected a floating-point tensor "
                                f"({', '.join(FLOAT_CODES.values())}), found {code}")
        if code == "BF16":
            bf16[name] = entry
    safe_open = require("safetensors", "reading a safetensors file").safe_open
    try:
        with safe_open(str(path), framework="numpy") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                if name not in bf16:
                    arrays[name] = fh.get_tensor(name)
    except Exception as exc:  # safetensors raises its own error types
        raise SpecError(f"cannot read {path} as a safetensors file: {exc}") from None
    if bf16:
        raw = path.read_bytes()
        for name, entry in bf16.items():
            try:
                lo, hi = entry["data_offsets"]
                bits = np.frombuffer(raw[start + lo:start + hi], dtype="<u2").astype(np.uint32)
                arrays[name] = (bits << 16).view(np.float32).reshape(entry["shape"])  # exact
            except (KeyError, TypeError, ValueError) as exc:
                raise SpecError(f"{name}: cannot decode the bfloat16 tensor: {exc}") from None
    return arrays, meta.get(METADATA_KEY) if isinstance(meta, dict) else None


def needs_torch(source: object) -> bool:
    """Whether reading ``source`` imports torch (a ``.pt`` file; not a safetensors file)."""
    if not isinstance(source, (str, Path)) or not Path(source).is_file():
        return False
    path = Path(source)
    return path.suffix.lower() not in SAFETENSORS_SUFFIXES and not is_safetensors(path)


def is_safetensors(path: Path) -> bool:
    """A torch file is a zip (``PK``); a safetensors file starts with a small header size."""
    with path.open("rb") as fh:
        head = fh.read(9)
    return len(head) == 9 and head[:2] != b"PK" and head[8:9] == b"{"
