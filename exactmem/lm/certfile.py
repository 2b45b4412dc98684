"""Emitting language-model certificates ``exactmem.lm-certificate/1``
(docs/trained-models.md, "Certificate"): the model's shape and norm kind (``"norm"``:
``"layernorm"`` or ``"rmsnorm"``, always written), the options of GPT-NeoX / LLaMA-style
blocks and GPT-2's score options where they differ from GPT-2's function
(:func:`options_json`), every tensor exactly (integer
numerators over one power of two per tensor), the dataset, the claimed positions, optionally
per-sequence code-length upper bounds (docs/memorized-bits.md), a digest.
Canonical JSON, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.arith import format_rational
from exactmem.errors import SpecError
from exactmem.lm.decoder import CERTIFIED_ACTIVATIONS, LMSpec
from exactmem.model.dataset import Dataset, canonical_json

LM_FORMAT = "exactmem.lm-certificate/1"


def model_json(spec: LMSpec, weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``model`` object: shape fields and every stored tensor, exactly; or, with
    ``weights``, the binding of a weights file in place of the tensors
    (:mod:`exactmem.lm.weightsfile`)."""
    source: dict[str, Any] = {"weights": weights}
    if weights is None:
        shapes = spec.shapes()
        tensors = {}
        for name in sorted(spec.tensors):
            nums, e = spec.exact(name)
            tensors[name] = {"shape": shapes[name], "scale": e,
                             "values": [str(p) for p in nums]}
        source = {"tensors": tensors}
    out: dict[str, Any] = {
        "architecture": "pre-ln-decoder" if spec.norm_first else "post-ln-decoder",
        "vocab_size": spec.vocab_size, "context": spec.context, "d_model": spec.d_model,
        "heads": spec.heads, "layers": spec.layers, "d_ff": spec.d_ff,
        "activation": spec.activation, "layer_norm_eps": format_rational(spec.eps_fraction()),
        "norm": spec.norm, "tied_head": spec.tied_head, **source}
    if not spec.final_norm:
        out["final_norm"] = False
    out.update(options_json(spec))
    return out


def options_json(spec: LMSpec) -> dict[str, Any]:
    """The header fields of the GPT-NeoX / LLaMA parts and GPT-2's score options, each only
    when it differs from GPT-2's function (so a GPT-2 certificate is unchanged)."""
    out: dict[str, Any] = {}
    if spec.n_kv != spec.heads:
        out["kv_heads"] = spec.n_kv
    if spec.rotary_dims:
        out["rotary_dims"] = spec.rotary_dims
    for key, default in (("parallel_residual", False), ("gated_mlp", False),
                         ("score_scale", True), ("inverse_layer_scale", False)):
        if getattr(spec, key) is not default:
            out[key] = not default
    return out


def refuse_uncertified(spec: LMSpec) -> None:
    """One :class:`SpecError` line naming what of ``spec`` the certificate format does not
    carry yet (:meth:`~exactmem.lm.decoder.LMSpec.uncertified`: the checker does not prove
    it), if anything."""
    if spec.activation not in CERTIFIED_ACTIVATIONS:
        raise SpecError(f"activation: {spec.activation!r} is not in the certificate format "
                        f"(the checker proves {', '.join(CERTIFIED_ACTIVATIONS)}); not writing "
                        "a certificate")
    missing = spec.uncertified()
    if missing:
        raise SpecError(f"{', '.join(missing)}: not in the certificate format yet (the "
                        "checker does not prove it); not writing a certificate")


def build_lm_certificate(spec: LMSpec, ds: Dataset, positions: Sequence[Sequence[int]],
                         partial: bool, bind: str | None = None,
                         code_lengths: Sequence[Fraction] | None = None,
                         execution: dict[str, Any] | None = None,
                         weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """The certificate claiming ``positions[i]`` of sequence ``i``; the dataset embedded, or
    bound by SHA-256 and the path ``bind`` (relative to the certificate); with
    ``code_lengths``, the claimed upper bound of each sequence's code length in bits; with
    ``execution`` (``{"format", "ulps", "positions"}`` and optionally ``code_length_bits``),
    the positions (and code-length bounds) claimed for every float execution of that model
    (docs/trained-models.md, "Execution claims"); with
    ``weights``, the tensors bound in a weights file (:func:`model_json`)."""
    refuse_uncertified(spec)
    data: dict[str, Any] = {"sha256": ds.sha256()}
    if bind is None:
        data["data"] = ds.to_json()
    else:
        data["path"] = bind
    claims: dict[str, Any] = {"partial": partial, "positions": [list(p) for p in positions]}
    if code_lengths is not None:
        claims["code_length_bits"] = [format_rational(c) for c in code_lengths]
    if execution is not None:
        claims["execution"] = {"format": execution["format"], "ulps": execution["ulps"],
                               "positions": [list(p) for p in execution["positions"]]}
        if execution.get("code_length_bits") is not None:
            claims["execution"]["code_length_bits"] = [
                format_rational(c) for c in execution["code_length_bits"]]
    body: dict[str, Any] = {"format": LM_FORMAT, "model": model_json(spec, weights),
                            "dataset": data, "claims": claims}
    body["digest"] = "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()
    return body


def write_lm_certificate(cert: dict[str, Any], path: str | Path) -> None:
    """Write atomically, canonical JSON and one trailing newline."""
    from exactmem.files.atomic import write_text_atomic

    write_text_atomic(Path(path), canonical_json(cert) + "\n")


def lm_info(cert: dict[str, Any], base: Path | None = None) -> dict[str, Any]:
    """What an LM certificate claims (``exactmem check`` decides whether it holds): the
    position counts ``certified_positions`` of ``positions``, the sequences claimed in full,
    and the model's shape, norm kind and parameter count.  The dataset must be embedded;
    bound weights are read from ``base`` (the certificate's folder) for code lengths only.

    With code lengths: ``certified_memorized_bits`` (the lower bound the checker states from
    the claimed code lengths: sum of ``max(0, n log2 V - C_i)``, Morris et al.'s sum, and
    ``..._unclipped``), ``float_memorized_bits`` (float64 forward pass of the same weights on
    the same data, an estimate) and ``certified_bits_per_param`` (per dense parameter)."""
    from exactmem.model.dataset import dataset_from_json

    m = cert["model"]
    ds = dataset_from_json(cert["dataset"]["data"])
    claimed = cert["claims"]["positions"]
    params = _params(m)
    extra: dict[str, Any] = {}
    if "code_length_bits" in cert["claims"]:
        extra = memorized_info(cert, ds, params, base)
    if "execution" in cert["claims"]:
        e = cert["claims"]["execution"]
        extra["execution"] = {"format": e["format"], "ulps": e["ulps"],
                              "certified_positions": sum(map(len, e["positions"])),
                              "sequences_in_full": sum(len(p) == ds.n for p in e["positions"])}
    return {**extra, "format": LM_FORMAT, "N": ds.N, "n": ds.n, "positions": ds.N * ds.n,
            "certified_positions": sum(map(len, claimed)),
            "sequences_in_full": sum(len(p) == ds.n for p in claimed),
            "partial": cert["claims"]["partial"],
            "params": params, "norm": m.get("norm", "layernorm"),
            **{k: m[k] for k in ("kv_heads", "rotary_dims", "parallel_residual", "gated_mlp",
                                 "score_scale", "inverse_layer_scale") if k in m},
            **{k: m[k] for k in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff",
                                 "activation", "tied_head")}}



def _params(m: dict[str, Any]) -> int:
    """The parameter count of a certificate's ``model``: its tensors' sizes (bound weights:
    from the shapes the header gives the tensors it names)."""
    if "tensors" in m:
        return sum(len(t["values"]) for t in m["tensors"].values())
    from math import prod

    from exactmem.checker.lm.lm_model import shapes

    every = shapes(m)
    return sum(prod(every[k]) for k in m["weights"]["tensors"])


def spec_from_lm_certificate(cert: dict[str, Any], base: Path | None = None) -> LMSpec:
    """The :class:`LMSpec` of a certificate's ``model`` (every value exactly the float it
    was written from; bound weights read from the certificate's folder ``base`` once their
    length and SHA-256 match, :func:`exactmem.checker.lm.lm_weights.load`)."""
    import math

    import numpy as np

    m = cert["model"]
    if "weights" in m:
        tensors = _bound_tensors(m["weights"], base or Path("."))
    else:
        tensors = {name: np.array([math.ldexp(int(v), -t["scale"]) for v in t["values"]],
                                  dtype=np.float64).reshape(t["shape"])
                   for name, t in m["tensors"].items()}
    return LMSpec(vocab_size=m["vocab_size"], context=m["context"], d_model=m["d_model"],
                  heads=m["heads"], layers=m["layers"], d_ff=m["d_ff"],
                  activation=m["activation"],
                  layer_norm_eps=float(Fraction(m["layer_norm_eps"])),
                  tied_head=m["tied_head"], tensors=tensors,
                  norm_first=m["architecture"] == "pre-ln-decoder",
                  final_norm=m.get("final_norm", True),
                  norm=m.get("norm", "layernorm"), kv_heads=m.get("kv_heads", 0),
                  rotary_dims=m.get("rotary_dims", 0),
                  parallel_residual=m.get("parallel_residual", False),
                  gated_mlp=m.get("gated_mlp", False), score_scale=m.get("score_scale", True),
                  inverse_layer_scale=m.get("inverse_layer_scale", False))


def _bound_tensors(binding: Any, base: Path) -> dict[str, Any]:
    """The tensors of a bound weights file as float64 arrays (one-line errors)."""
    from exactmem.checker.lm.lm_weights import load
    from exactmem.checker.verdict import Unusable
    from exactmem.errors import CertificateError
    from exactmem.lm.weightsfile import read_array

    try:
        bound = load(binding, base)
    except Unusable as exc:
        raise CertificateError(str(exc)) from None
    if isinstance(bound, str):
        raise CertificateError(bound)
    return {name: read_array(*bound.raw(name)) for name in bound.names}


def memorized_info(cert: dict[str, Any], ds: Dataset, params: int,
                   base: Path | None = None) -> dict[str, Any]:
    """Certified (from the claimed code lengths) and float bits below the uniform code
    (``*_memorized_bits``: Morris et al.'s name; memorized bits only on uniform random
    data), over the distinct sequences; ``execution_memorized_bits`` from the code lengths
    claimed for every float execution (``claims.execution.code_length_bits``) when given."""
    import numpy as np

    from exactmem.checker.lm import lm_codelength
    from exactmem.lm.codelength import code_length_float, memorized_bits
    from exactmem.lm.float64 import logits64

    vocab = ds.vocab_size or cert["model"]["vocab_size"]
    once: dict[tuple[Any, Any], int] = {}  # a repeated sequence counts once, as in the checker
    for i, key in enumerate(zip(ds.sequences, ds.labels, strict=True)):
        once.setdefault(key, i)
    keep = sorted(once.values())
    coded = [Fraction(cert["claims"]["code_length_bits"][i]) for i in keep]
    clipped, unclipped = lm_codelength.memorized(
        [(c.numerator, c.denominator) for c in coded],
        lm_codelength.reference_lower(ds.n, vocab))
    logits = logits64(spec_from_lm_certificate(cert, base),
                      np.array([ds.sequences[i] for i in keep]))
    floats = [code_length_float(x, ds.labels[i]) for x, i in zip(logits, keep, strict=True)]
    est = memorized_bits(floats, ds.n, vocab)
    execution: dict[str, Any] = {}
    ex = cert["claims"].get("execution") or {}
    if "code_length_bits" in ex:  # the same sums over the bounds of every execution
        per = [Fraction(ex["code_length_bits"][i]) for i in keep]
        e_clip, e_unclip = lm_codelength.memorized(
            [(c.numerator, c.denominator) for c in per],
            lm_codelength.reference_lower(ds.n, vocab))
        execution = {"execution_memorized_bits": float(e_clip),
                     "execution_memorized_bits_unclipped": float(e_unclip),
                     "execution_code_length_bits": float(sum(per, Fraction(0)))}
    return {**execution, "certified_memorized_bits": float(clipped),
            "certified_memorized_bits_unclipped": float(unclipped),
            "float_memorized_bits": est.clipped,
            "float_memorized_bits_unclipped": est.unclipped,
            "reference_bits": est.reference * len(keep), "distinct_sequences": len(keep),
            "certified_bits_per_param": float(clipped) / params,
            "certified_code_length_bits": float(sum(coded, Fraction(0)))}
