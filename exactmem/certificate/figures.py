"""The size figures of a certificate (``exactmem info``): the network's sizes and bits, the
bound that describes it and the lower bounds beside it, what the certificate claims; for a
language-model certificate, its positions and memorized bits (docs/cli.md, docs/architecture.md
"Size accounting")."""

from __future__ import annotations

from typing import Any


def info(cert: dict[str, Any]) -> dict[str, Any]:
    from exactmem.certificate import dataset_from_certificate, spec_from_certificate
    from exactmem.constructions.bounds import figures
    from exactmem.model.sizes import sizes

    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert)
    out: dict[str, Any] = dict(sizes(spec).as_dict())
    name = cert.get("construction", {}).get("name")
    out.update({"N": ds.N, "n": ds.n, "task": ds.task, "inputs": ds.inputs,
                "d": ds.dim if ds.inputs == "vectors" else ds.vocab_size,
                "C": ds.num_classes, "construction": name,
                "params": cert.get("construction", {}).get("params", {})})
    claims = cert.get("claims", {})  # what the certificate claims; `exactmem check` decides
    out["float_exact"] = list(claims.get("float_exact", []))
    out.update(figures(spec, ds, name, out["params"], out["float_exact"]))
    out["claimed_sequences"] = len(claims.get("sequences", range(ds.N)))
    return out


LM_KEYS = ("certified_positions", "positions", "sequences_in_full", "N", "n", "partial",
           "params", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
           "activation", "tied_head")


def lm_summary(path: str) -> dict[str, Any] | None:
    """:func:`exactmem.lm.certfile.lm_info` of a language-model certificate (the dataset
    embedded or bound by path beside it), or None when ``path`` holds another format."""
    from pathlib import Path

    from exactmem.checker.strict_json import read_json
    from exactmem.checker.verdict import Unusable
    from exactmem.errors import CertificateError
    from exactmem.lm.certfile import LM_FORMAT, lm_info

    try:
        cert = read_json(Path(path))
        if not isinstance(cert, dict) or cert.get("format") != LM_FORMAT:
            return None
        entry = cert.get("dataset")
        if isinstance(entry, dict) and "data" not in entry and isinstance(entry.get("path"), str):
            cert = {**cert, "dataset": {**entry,
                                        "data": read_json(Path(path).parent / entry["path"])}}
        return lm_info(cert, Path(path).parent)
    except Unusable as exc:
        raise CertificateError(str(exc)) from None
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as exc:
        raise CertificateError(f"{path}: not a readable {LM_FORMAT} certificate "
                               f"({type(exc).__name__}: {exc})") from None
