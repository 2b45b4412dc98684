"""Assemble, digest, write and read certificates (format ``exactmem.certificate/1``).

The digest is the SHA-256 of the canonical JSON text of the certificate without its
``digest`` field (sorted keys, no spaces, ASCII), written as ``"sha256:<hex>"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.arith import format_rational
from exactmem.certificate.encode import spec_from_json, spec_to_json
from exactmem.checker.parse import network
from exactmem.checker.strict_json import read_json
from exactmem.checker.verdict import Unusable
from exactmem.constructions.base import BuildResult
from exactmem.errors import CertificateError, DatasetError
from exactmem.files.atomic import write_text_atomic
from exactmem.model.dataset import Dataset, canonical_json, dataset_from_json
from exactmem.model.evaluate import Evaluation
from exactmem.model.sizes import sizes
from exactmem.model.spec import NetworkSpec

CERTIFICATE_FORMAT = "exactmem.certificate/1"


def digest_of(cert: dict[str, Any]) -> str:
    body = {k: v for k, v in cert.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _claim(v: Fraction | int | None) -> str | None:
    return None if v is None else format_rational(v)


def _claims(predictions: Sequence[Sequence[Fraction | int | None]]) -> list[list[str | None]]:
    """The claimed outputs' texts; equal values share one string, and rows of one output
    (next-token) share one list per value (a memorizing network repeats its few label
    values N times).  The rows are read, never changed in place."""
    text: dict[Fraction | int | None, str | None] = {}
    single: dict[Fraction | int | None, list[str | None]] = {}
    same: dict[int, list[str | None]] = {}  # by row object: rows shared by the predictions
    out: list[list[str | None]] = []        # (one per label value) are read once

    def said(v: Fraction | int | None) -> str | None:
        return text[v] if v in text else text.setdefault(v, _claim(v))

    for row in predictions:
        hit = same.get(id(row))
        if hit is None:
            if len(row) == 1:
                (v,) = row
                hit = single.get(v)
                if hit is None:
                    hit = single[v] = [said(v)]
            else:
                hit = [said(v) for v in row]
            same[id(row)] = hit
        out.append(hit)
    return out


def build_certificate(ds: Dataset, result: BuildResult, construction: str,
                      evaluation: Evaluation | None = None,
                      dataset_path: str | None = None) -> dict[str, Any]:
    """The certificate for ``result.spec`` memorizing ``ds``.

    ``evaluation`` (from :func:`exactmem.model.evaluate`) supplies the claimed outputs;
    it is computed when omitted.  With ``dataset_path`` the dataset is bound by its
    SHA-256 and path instead of being embedded.
    """
    if evaluation is None:
        from exactmem.model.evaluate import evaluate

        evaluation = evaluate(result.spec, ds)
    data = ds.to_json()
    dataset: dict[str, Any] = {"sha256": ds.sha256(data)}
    if dataset_path is None:
        dataset["data"] = data
    else:
        dataset["path"] = dataset_path
    cert: dict[str, Any] = {
        "format": CERTIFICATE_FORMAT,
        "construction": {"name": construction, "params": dict(result.params)},
        "dataset": dataset,
        "network": spec_to_json(result.spec),
        "claims": {"outputs": _claims(evaluation.predictions)},
        "sizes": sizes(result.spec).as_dict(),
        "hints": dict(result.hints),
    }
    cert["digest"] = digest_of(cert)
    return cert


def claim_float_exact(cert: dict[str, Any], formats: Sequence[str] | None = None,
                      base: Path | None = None) -> list[str]:
    """Add to ``cert`` the float formats (of ``formats``, default all) in which its network is
    float-exact (docs/float-exact.md), as ``claims.float_exact``, and re-digest it.  The
    formats are found with the checker's own rule, which re-verifies them at check time.
    Returns the formats claimed (none: the certificate is left unchanged)."""
    from exactmem.checker import cert_dataset as cdataset
    from exactmem.checker import floatexact
    from exactmem.checker import net_forward as forward

    names = list(formats or floatexact.FORMATS)
    unknown = [f for f in names if f not in floatexact.CLAIMS]
    if unknown:
        raise CertificateError(f"float format: expected some of {sorted(floatexact.CLAIMS)}, "
                               f"found {unknown}")
    try:
        net, layers, readout = network(cert["network"])
        toks = cdataset.dataset(cert["dataset"], base or Path("."))[2]
    except Unusable as exc:
        raise CertificateError(str(exc)) from None
    state = cdataset.initial(net, toks, layers)
    needs = forward.needed_positions(layers, readout["positions"], net["n"])
    held = [f for f in names if not floatexact.check(net, layers, state, needs, [f])]
    if held:
        cert["claims"] = {**cert["claims"], "float_exact": held}
        cert["digest"] = digest_of(cert)
    return held


def claim_subset(cert: dict[str, Any], sequences: Sequence[int]) -> None:
    """Restrict ``cert``'s claims to the given sequence indices (``claims.sequences``; the
    verdict then says which subset is memorized) and re-digest it."""
    ids = sorted(set(sequences))
    outputs = cert["claims"]["outputs"]
    if not ids or ids[0] < 0 or ids[-1] >= len(outputs) or "sequences" in cert["claims"]:
        raise CertificateError("claim_subset: indices of the certificate's sequences expected, "
                               "once")
    cert["claims"] = {**cert["claims"], "sequences": ids,
                      "outputs": [outputs[i] for i in ids]}
    cert["digest"] = digest_of(cert)


def certificate_text(cert: dict[str, Any]) -> str:
    """Canonical text: byte-identical for identical certificates."""
    return canonical_json(cert) + "\n"


def write_certificate(cert: dict[str, Any], path: str | Path) -> None:
    write_text_atomic(Path(path), certificate_text(cert))


def read_certificate(path: str | Path, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a certificate file with the checker's strict reader (regular UTF-8 file under
    the size limit, no duplicate keys, no floats); errors are :class:`CertificateError`.
    Reading does not check it: ``exactmem check`` does.  A certificate of a format in
    ``also`` (e.g. a language model's) is returned as read; otherwise its network is
    parsed."""
    p = Path(path)
    try:
        obj = read_json(p)
        if isinstance(obj, dict) and obj.get("format") in also:
            return obj
        if not isinstance(obj, dict) or obj.get("format") != CERTIFICATE_FORMAT:
            names = " or ".join((CERTIFICATE_FORMAT, *also))
            raise Unusable(f"{p}: not an {names} certificate")
        network(obj.get("network"))
    except Unusable as exc:
        raise CertificateError(str(exc)) from None
    return obj


def spec_from_certificate(cert: dict[str, Any]) -> NetworkSpec:
    return spec_from_json(cert.get("network"))


def dataset_from_certificate(cert: dict[str, Any], base: Path | None = None) -> Dataset:
    """The embedded dataset, or the bound file (path relative to ``base``), hash-checked."""
    entry = cert.get("dataset") or {}
    if "data" in entry:
        ds = dataset_from_json(entry["data"])
    elif "path" in entry:
        from exactmem.model.dataset import load_dataset

        ds = load_dataset((base or Path(".")) / entry["path"])
    else:
        raise CertificateError("dataset: neither embedded data nor a path")
    if ds.sha256() != entry.get("sha256"):
        raise DatasetError("dataset: its SHA-256 does not match the certificate")
    return ds
