"""NetworkSpec <-> JSON, in the certificate's canonical layout (docs/certificate-format.md).

Matrices are lists of rows of ``"p/q"`` strings (integers as ``"p"``), biases flat lists.
"""

from __future__ import annotations

import math
from typing import Any

from exactmem.arith import ScaledMatrix, format_rational, to_rational
from exactmem.errors import CertificateError, NotExactError
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    Linear,
    NetworkSpec,
    Readout,
)


def matrix_to_json(m: ScaledMatrix) -> list[list[str]]:
    """Each entry ``x / den`` as :func:`format_rational` writes it, reduced by one ``gcd``
    (no ``Fraction`` made: ``den > 0``)."""
    den = m.den
    if den == 1:
        return [[f"{x:d}" for x in row] for row in m.num]
    return [[_over(x, den) for x in row] for row in m.num]


def _over(x: int, den: int) -> str:
    g = math.gcd(x, den)
    return f"{x // g:d}" if g == den else f"{x // g:d}/{den // g:d}"


def vector_to_json(m: ScaledMatrix | None) -> list[str] | None:
    return None if m is None else [format_rational(v) for v in m.column_values()]


def _affine_json(a: Affine) -> dict[str, Any]:
    return {"weight": matrix_to_json(a.weight), "bias": vector_to_json(a.bias)}


_HEAD_BIASES = ("query_bias", "key_bias", "value_bias", "output_bias")


def _head_json(h: Head) -> dict[str, Any]:
    """A head; biases and a scale other than 1 only when present (defaults stay unwritten,
    so networks without them encode as before)."""
    out: dict[str, Any] = {"query": matrix_to_json(h.query), "key": matrix_to_json(h.key),
                           "value": matrix_to_json(h.value), "output": matrix_to_json(h.output)}
    for name in _HEAD_BIASES:
        if getattr(h, name) is not None:
            out[name] = vector_to_json(getattr(h, name))
    if h.scale != 1:
        out["scale"] = format_rational(h.scale)
    return out


def layer_to_json(layer: Layer) -> dict[str, Any]:
    if isinstance(layer, Embedding):
        emb: dict[str, Any] = {"type": "embedding", "table": matrix_to_json(layer.table)}
        if layer.positions is not None:
            emb["positions"] = matrix_to_json(layer.positions)
        return emb
    if isinstance(layer, Linear):
        return {"type": "linear", **_affine_json(layer.map)}
    if isinstance(layer, FeedForward):
        return {"type": "feedforward", "residual": layer.residual,
                "maps": [_affine_json(a) for a in layer.layers]}
    if isinstance(layer, Attention):
        att: dict[str, Any] = {"type": "attention", "kind": layer.kind,
                               "residual": layer.residual,
                               "keys": list(layer.keys) if layer.keys is not None else None,
                               "heads": [_head_json(h) for h in layer.heads]}
        if layer.causal:
            att["causal"] = True
        return att
    raise CertificateError(f"cannot encode layer {type(layer).__name__}")


def spec_to_json(spec: NetworkSpec) -> dict[str, Any]:
    return {"input": {"kind": spec.input_kind, "dim": spec.input_dim, "seq_len": spec.seq_len},
            "layers": [layer_to_json(la) for la in spec.layers],
            "readout": {"kind": spec.readout.kind, "positions": spec.readout.positions}}


# decoding ---------------------------------------------------------------------------
def _matrix(obj: object, where: str) -> ScaledMatrix:
    if not isinstance(obj, list) or not obj or not all(isinstance(r, list) for r in obj):
        raise CertificateError(f"{where}: expected a non-empty list of rows")
    try:
        return ScaledMatrix.from_rows(obj)
    except (NotExactError, ValueError) as exc:
        raise CertificateError(f"{where}: {exc}") from exc


def _vector(obj: object, where: str) -> ScaledMatrix | None:
    if obj is None:
        return None
    if not isinstance(obj, list):
        raise CertificateError(f"{where}: expected a list or null")
    try:
        return ScaledMatrix.column([to_rational(x, where) for x in obj])
    except (NotExactError, ValueError) as exc:
        raise CertificateError(f"{where}: {exc}") from exc


def _affine(obj: dict[str, Any], where: str) -> Affine:
    return Affine(_matrix(obj.get("weight"), f"{where}.weight"),
                  _vector(obj.get("bias"), f"{where}.bias"))


def _head(h: dict[str, Any], where: str) -> Head:
    q, k, v, o = (_matrix(h.get(p), f"{where}.{p}") for p in ("query", "key", "value", "output"))
    bq, bk, bv, bo = (_vector(h.get(p), f"{where}.{p}") for p in _HEAD_BIASES)
    scale = to_rational(h.get("scale", "1"), f"{where}.scale")
    return Head(q, k, v, o, query_bias=bq, key_bias=bk, value_bias=bv, output_bias=bo,
                scale=scale)


def layer_from_json(obj: object, where: str) -> Layer:
    if not isinstance(obj, dict):
        raise CertificateError(f"{where}: expected an object")
    kind = obj.get("type")
    if kind == "embedding":
        pos = obj.get("positions")
        return Embedding(_matrix(obj.get("table"), f"{where}.table"),
                         None if pos is None else _matrix(pos, f"{where}.positions"))
    if kind == "linear":
        return Linear(_affine(obj, where))
    if kind == "feedforward":
        maps = obj.get("maps")
        if not isinstance(maps, list):
            raise CertificateError(f"{where}.maps: expected a list")
        return FeedForward(tuple(_affine(m, f"{where}.maps[{i}]") for i, m in enumerate(maps)),
                           residual=bool(obj.get("residual")))
    if kind == "attention":
        heads = obj.get("heads")
        if not isinstance(heads, list):
            raise CertificateError(f"{where}.heads: expected a list")
        hs = tuple(_head(h, f"{where}.heads[{i}]") for i, h in enumerate(heads))
        keys = obj.get("keys")
        return Attention(hs, kind=obj.get("kind"), residual=bool(obj.get("residual")),  # type: ignore[arg-type]
                         keys=tuple(keys) if keys is not None else None,
                         causal=bool(obj.get("causal", False)))
    raise CertificateError(f"{where}.type: unknown layer type {kind!r}")


def spec_from_json(obj: object) -> NetworkSpec:
    if not isinstance(obj, dict):
        raise CertificateError("network: expected an object")
    inp = obj.get("input")
    layers = obj.get("layers")
    ro = obj.get("readout")
    if not isinstance(inp, dict) or not isinstance(ro, dict) or not isinstance(layers, list):
        raise CertificateError("network: needs 'input' and 'readout' objects and a 'layers' list")
    dim, n = inp.get("dim"), inp.get("seq_len")
    if type(dim) is not int or type(n) is not int:
        raise CertificateError("network.input: 'dim' and 'seq_len' must be integers")
    return NetworkSpec(
        input_kind=inp.get("kind"), input_dim=dim, seq_len=n,  # type: ignore[arg-type]
        layers=tuple(layer_from_json(la, f"network.layers[{i}]") for i, la in enumerate(layers)),
        readout=Readout(ro.get("kind"), ro.get("positions")))  # type: ignore[arg-type]
