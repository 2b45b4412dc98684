"""Emitting language-model certificates ``exactmem.lm-certificate/1``
(docs/trained-models.md, "Certificate"): the model's shape, every tensor exactly (integer
numerators over one power of two per tensor), the dataset, the claimed positions, a digest.
Canonical JSON, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exactmem.arith import format_rational
from exactmem.model.dataset import Dataset, canonical_json
from exactmem.model.lm_spec import LMSpec

LM_FORMAT = "exactmem.lm-certificate/1"


def model_json(spec: LMSpec) -> dict[str, Any]:
    """The ``model`` object: shape fields and every stored tensor, exactly."""
    shapes = spec.shapes()
    tensors = {}
    for name in sorted(spec.tensors):
        nums, e = spec.exact(name)
        tensors[name] = {"shape": shapes[name], "scale": e, "values": [str(p) for p in nums]}
    return {"architecture": "pre-ln-decoder", "vocab_size": spec.vocab_size,
            "context": spec.context, "d_model": spec.d_model, "heads": spec.heads,
            "layers": spec.layers, "d_ff": spec.d_ff, "activation": spec.activation,
            "layer_norm_eps": format_rational(spec.eps_fraction()),
            "tied_head": spec.tied_head, "tensors": tensors}


def build_lm_certificate(spec: LMSpec, ds: Dataset, positions: Sequence[Sequence[int]],
                         partial: bool, bind: str | None = None) -> dict[str, Any]:
    """The certificate claiming ``positions[i]`` of sequence ``i``; the dataset embedded, or
    bound by SHA-256 and the path ``bind`` (relative to the certificate)."""
    data: dict[str, Any] = {"sha256": ds.sha256()}
    if bind is None:
        data["data"] = ds.to_json()
    else:
        data["path"] = bind
    body: dict[str, Any] = {"format": LM_FORMAT, "model": model_json(spec), "dataset": data,
                            "claims": {"partial": partial,
                                       "positions": [list(p) for p in positions]}}
    body["digest"] = "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()
    return body


def write_lm_certificate(cert: dict[str, Any], path: str | Path) -> None:
    """Write atomically, canonical JSON and one trailing newline."""
    from exactmem.model.atomic import write_text_atomic

    write_text_atomic(Path(path), canonical_json(cert) + "\n")


def lm_info(cert: dict[str, Any]) -> dict[str, Any]:
    """What an LM certificate claims (``exactmem check`` decides whether it holds): the
    position counts ``certified_positions`` of ``positions``, the sequences claimed in full,
    and the model's shape and parameter count.  The dataset must be embedded."""
    from exactmem.model.dataset import dataset_from_json

    m = cert["model"]
    ds = dataset_from_json(cert["dataset"]["data"])
    claimed = cert["claims"]["positions"]
    return {"format": LM_FORMAT, "N": ds.N, "n": ds.n, "positions": ds.N * ds.n,
            "certified_positions": sum(map(len, claimed)),
            "sequences_in_full": sum(len(p) == ds.n for p in claimed),
            "partial": cert["claims"]["partial"],
            "params": sum(len(t["values"]) for t in m["tensors"].values()),
            **{k: m[k] for k in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff",
                                 "activation", "tied_head")}}

