"""safetensors export bound to its certificate, with an exact-rational sidecar.

safetensors stores little-endian float tensors (no rationals), so the file is written
together with a sidecar JSON (format ``exactmem.exact-weights/1``) holding every weight
as a ``"p/q"`` string.  The safetensors ``__metadata__`` (string -> string) binds the three:

* ``exactmem.format``: ``exactmem.safetensors/1``; ``exactmem.dtype``: the float dtype;
* ``exactmem.certificate_sha256``: SHA-256 of the certificate file's bytes, and
  ``exactmem.certificate_digest``: its self-digest;
* ``exactmem.sidecar_sha256``: SHA-256 of the sidecar file's bytes;
* ``exactmem.skeleton``: the network structure (:mod:`exactmem.exporters.skeleton`).

Tensor names and shapes are the layout of :mod:`exactmem.exporters.skeleton`.  numpy writes
the file, so the dtypes are float64, float32 and float16 (bfloat16: use the torch export).
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.arith import format_rational, to_rational
from exactmem.errors import CertificateError, NotExactError, SpecError
from exactmem.exporters.skeleton import named_matrices, skeleton, spec_from_tensors
from exactmem.files.atomic import write_bytes_atomic
from exactmem.floats.formats import FORMATS, rounded_values
from exactmem.model.dataset import canonical_json
from exactmem.model.spec import NetworkSpec

SAFETENSORS_FORMAT = "exactmem.safetensors/1"
SIDECAR_FORMAT = "exactmem.exact-weights/1"
NUMPY_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sidecar(spec: NetworkSpec) -> dict[str, Any]:
    """Every weight as exact ``"p/q"`` text, with the structure."""
    tensors: dict[str, Any] = {}
    for name, m, is_vec in named_matrices(spec):
        rows = [[format_rational(Fraction(x, m.den)) for x in row] for row in m.num]
        tensors[name] = [r[0] for r in rows] if is_vec else rows
    return {"format": SIDECAR_FORMAT, "skeleton": skeleton(spec), "tensors": tensors}


def spec_from_sidecar(obj: dict[str, Any]) -> NetworkSpec:
    if obj.get("format") != SIDECAR_FORMAT:
        raise CertificateError(f"not an {SIDECAR_FORMAT} file")
    tensors = obj["tensors"]

    def get(name: str, is_vec: bool) -> list[list[Fraction]]:
        if name not in tensors:
            raise SpecError(f"the sidecar lacks the tensor {name!r}")
        t = tensors[name]
        if is_vec:
            return [[to_rational(x, name)] for x in t]
        return [[to_rational(x, name) for x in row] for row in t]

    return spec_from_tensors(obj["skeleton"], get)


def write_safetensors(spec: NetworkSpec, out: str | Path, certificate: str | Path,
                      dtype: str = "float64", sidecar_path: str | Path | None = None,
                      ) -> tuple[Path, Path]:
    """Write ``out`` (safetensors) and its sidecar (default ``OUT.exact.json``), each
    atomically (:mod:`exactmem.files.atomic`), the sidecar first; return both paths.
    ``certificate`` may be gzip-compressed (its hash is that of the file's bytes)."""
    from exactmem.certificate import read_certificate
    from exactmem.files.atomic import atomic_path
    from exactmem.optional import require

    save_file = require("safetensors.numpy", "the safetensors export").save_file
    if dtype not in NUMPY_DTYPES:
        raise SpecError(f"safetensors export supports {sorted(NUMPY_DTYPES)}, found {dtype!r}")
    out = Path(out)
    side = Path(sidecar_path) if sidecar_path is not None else out.with_name(out.name +
                                                                             ".exact.json")
    side_bytes = (canonical_json(sidecar(spec)) + "\n").encode("utf-8")
    fmt = FORMATS[dtype]
    arrays: dict[str, np.ndarray] = {}
    for name, m, is_vec in named_matrices(spec):
        a = np.array(rounded_values(m, fmt), dtype=np.float64).reshape(m.shape)
        arrays[name] = np.ascontiguousarray((a.reshape(-1) if is_vec else a)
                                            .astype(NUMPY_DTYPES[dtype]))
    cert_obj = read_certificate(certificate)
    meta = {"exactmem.format": SAFETENSORS_FORMAT, "exactmem.dtype": dtype,
            "exactmem.certificate_sha256": sha256_file(certificate),
            "exactmem.certificate_digest": str(cert_obj.get("digest", "")),
            "exactmem.sidecar_sha256": hashlib.sha256(side_bytes).hexdigest(),
            "exactmem.skeleton": json.dumps(skeleton(spec), sort_keys=True)}
    write_bytes_atomic(side, side_bytes)
    with atomic_path(out) as tmp:
        save_file(arrays, str(tmp), metadata=meta)
    return out, side


def read_metadata(path: str | Path) -> dict[str, str]:
    from exactmem.optional import require

    safe_open = require("safetensors", "reading safetensors").safe_open
    with safe_open(str(path), framework="numpy") as fh:
        meta = fh.metadata() or {}
    return dict(meta)


def spec_from_safetensors(path: str | Path) -> NetworkSpec:
    """The network the file's floats describe, read exactly (each float is a dyadic rational)."""
    from exactmem.optional import require

    load_file = require("safetensors.numpy", "reading safetensors").load_file
    meta = read_metadata(path)
    if meta.get("exactmem.format") != SAFETENSORS_FORMAT:
        raise CertificateError(f"{path}: no {SAFETENSORS_FORMAT} metadata")
    arrays = load_file(str(path))

    def get(name: str, is_vec: bool) -> list[list[Fraction]]:
        if name not in arrays:
            raise SpecError(f"{path}: no tensor {name!r}")
        a = arrays[name].astype(np.float64)
        if not np.isfinite(a).all():
            raise NotExactError(f"{name}: the tensor holds an infinity or NaN")
        if is_vec:
            return [[Fraction(float(v))] for v in a.reshape(-1)]
        return [[Fraction(float(v)) for v in row] for row in a]

    return spec_from_tensors(json.loads(meta["exactmem.skeleton"]), get)


def verify_binding(path: str | Path, certificate: str | Path,
                   sidecar_path: str | Path | None = None) -> list[str]:
    """Problems with the binding of ``path`` to ``certificate`` and its sidecar (empty = bound):
    the hashes match, the sidecar's exact network is the certificate's, and the floats are
    the sidecar's weights rounded to the file's dtype."""
    from exactmem.certificate import read_certificate, spec_from_certificate

    path = Path(path)
    side = Path(sidecar_path) if sidecar_path is not None else path.with_name(path.name +
                                                                              ".exact.json")
    meta = read_metadata(path)
    problems: list[str] = []
    if meta.get("exactmem.certificate_sha256") != sha256_file(certificate):
        problems.append("the certificate's SHA-256 differs from the one in the metadata")
    if meta.get("exactmem.sidecar_sha256") != sha256_file(side):
        problems.append("the sidecar's SHA-256 differs from the one in the metadata")
    exact = spec_from_sidecar(json.loads(side.read_text()))
    if exact != spec_from_certificate(read_certificate(certificate)):
        problems.append("the sidecar's network is not the certificate's network")
    from exactmem.floats.fidelity import round_spec

    fmt = FORMATS.get(meta.get("exactmem.dtype", ""), None)
    try:
        same = fmt is not None and round_spec(exact, fmt) == spec_from_safetensors(path)
    except (SpecError, NotExactError) as exc:
        same = False
        problems.append(f"the weights do not fit the file's dtype: {exc}")
    if not same:
        problems.append("the tensors are not the exact weights rounded to the file's dtype")
    return problems
