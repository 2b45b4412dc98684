"""The weights file a language-model certificate binds instead of embedding its tensors
(docs/trained-models.md, "Bound weights").

``certify-model --bind-weights`` (the default above :data:`BIND_ABOVE` parameters) writes
``<certificate stem>.weights.safetensors`` beside the certificate: every tensor of the
certificate under its own name, in the certificate's layout (``x W`` with ``W`` of shape
``[in, out]``; the token table and the head ``[vocab, d]``), little-endian, as float32 when
float32 holds every value exactly (a checkpoint stored in float32 stays 4 bytes a weight)
and float64 otherwise; tensors in name order, the header canonical JSON padded to 8 bytes,
so the same model gives the same bytes.  The file is written atomically and never through
a symbolic link; the certificate's ``model.weights`` binds it by name, length and SHA-256
(:func:`write_weights`), and the checker reads it with the standard library
(:mod:`exactmem.checker.lm.lm_weights`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from exactmem.errors import OutputError
from exactmem.lm.decoder import LMSpec

BIND_ABOVE = 1_000_000  # parameters above which certify-model binds the weights by default
SUFFIX = ".weights.safetensors"
WEIGHTS_FORMAT = "exactmem.lm-weights/1"  # the file's __metadata__ "format"
NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}  # safetensors dtype -> numpy (BF16 apart)


def binds(spec: LMSpec, choice: bool | None) -> bool:
    """Whether the certificate binds its weights: ``choice`` when given (``--bind-weights``
    True, ``--embed-weights`` False), else when the model has more than
    :data:`BIND_ABOVE` parameters."""
    return spec.params > BIND_ABOVE if choice is None else choice


def weights_path(certificate: Path) -> Path:
    """The weights file of the certificate ``certificate``: beside it, its stem +
    :data:`SUFFIX`."""
    return certificate.with_name(certificate.stem + SUFFIX)


def refuse_links(certificate: Path) -> None:
    """Refuse, before any work, a certificate path or weights file path that is a symbolic
    link: the binding is relative to the certificate's own folder."""
    for path in (certificate, weights_path(certificate)):
        if path.is_symlink():
            raise OutputError(f"cannot write {path}: it is a symbolic link (a certificate "
                              "that binds its weights is written only to a plain path)")


def _stored(t: np.ndarray) -> tuple[str, np.ndarray]:
    """``(dtype, little-endian array)``: float32 when it holds every value exactly."""
    t = np.ascontiguousarray(t, dtype=np.float64)
    with np.errstate(all="ignore"):
        narrow = t.astype(np.float32)
    if np.array_equal(narrow.astype(np.float64), t):
        return "F32", narrow.astype("<f4")
    return "F64", t.astype("<f8")


def write_weights(spec: LMSpec, fh: BinaryIO, name: str) -> dict[str, Any]:
    """Write the weights file of ``spec`` to ``fh``; returns the certificate's
    ``model.weights`` binding it under the file name ``name``."""
    arrays = {k: _stored(spec.tensors[k]) for k in sorted(spec.tensors)}
    head: dict[str, Any] = {"__metadata__": {"format": WEIGHTS_FORMAT}}
    at = 0
    for k, (dtype, a) in arrays.items():
        head[k] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    text = json.dumps(head, sort_keys=True, separators=(",", ":")).encode("ascii")
    text += b" " * (-len(text) % 8)
    h = hashlib.sha256()
    for chunk in (len(text).to_bytes(8, "little"), text, *(a.tobytes() for _, a in
                                                           arrays.values())):
        h.update(chunk)
        fh.write(chunk)
    return {"path": name, "bytes": 8 + len(text) + at, "sha256": h.hexdigest(),
            "tensors": {k: k for k in arrays}}


@contextmanager
def bound_weights(spec: LMSpec, certificate: Path | None
                  ) -> Iterator[tuple[dict[str, Any] | None, Path | None]]:
    """``(binding, temporary path)`` of the weights file of ``certificate`` (nothing when
    ``None``): written to a temporary file that becomes :func:`weights_path` when the
    block ends without an error (and is removed otherwise)."""
    if certificate is None:
        yield None, None
        return
    from exactmem.files.atomic import atomic_path

    target = weights_path(certificate)
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as fh:
            binding = write_weights(spec, fh, target.name)
        yield binding, tmp


def read_array(dtype: str, shape: list[int], raw: memoryview) -> np.ndarray:
    """A tensor of a weights file as float64 (every value exactly)."""
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
        return bits.view("<f4").astype(np.float64).reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY[dtype]).astype(np.float64).reshape(shape)
