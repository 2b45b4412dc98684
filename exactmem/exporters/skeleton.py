"""The structure of a :class:`NetworkSpec` without its weights (the export layout).

Every export carries this skeleton (torch ``_extra_state``, safetensors metadata, ONNX
metadata) so that a file of plain tensors can be read back as the exact network.  Tensor
names and shapes follow the spec one-to-one, in the spec's column convention (a weight is
``out x in``; a token row ``x`` maps to ``x @ W.T + b``):

* ``layers.{i}.table``                       embedding, ``d x vocab`` (column t embeds token t)
* ``layers.{i}.weight`` / ``.bias``          linear map, ``out x in`` / ``out``
* ``layers.{i}.maps.{j}.weight`` / ``.bias`` feed-forward affine maps
* ``layers.{i}.heads.{h}.query|key|value|output`` attention heads (``s x m``, ``m x s`` output)
* ``layers.{i}.positions``                   positional embeddings, ``d x n`` (optional)
* ``layers.{i}.heads.{h}.query_bias|key_bias|value_bias|output_bias`` attention biases
  (optional; the layer's ``biases`` lists which, the same for every head)

Optional structure fields (absent = the default): ``"positions": true`` on an embedding;
``"causal": true``, ``"biases": [...]`` and ``"scales": ["p/q", ...]`` (one per head) on an
attention layer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix, format_rational, to_rational
from exactmem.errors import SpecError
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

SKELETON_FORMAT = "exactmem.skeleton/1"
Tensor2D = list[list[Fraction]]
BIAS_PARTS = ("query", "key", "value", "output")


def head_biases(layer: Attention) -> list[str]:
    """The projections (of :data:`BIAS_PARTS`) that carry a bias; every head must agree."""
    kinds = {tuple(p for p in BIAS_PARTS if getattr(h, f"{p}_bias") is not None)
             for h in layer.heads}
    if len(kinds) > 1:
        raise SpecError("the export layout needs the same attention biases in every head of "
                        f"a layer, found {sorted(kinds)}")
    return list(kinds.pop())


def skeleton(spec: NetworkSpec) -> dict[str, Any]:
    """The JSON-able structure of ``spec``: input, layer kinds and flags, readout."""
    layers: list[dict[str, Any]] = []
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            layers.append({"type": "embedding"} if layer.positions is None
                          else {"type": "embedding", "positions": True})
        elif isinstance(layer, Linear):
            layers.append({"type": "linear", "bias": layer.map.bias is not None})
        elif isinstance(layer, FeedForward):
            layers.append({"type": "feedforward", "residual": layer.residual,
                           "bias": [a.bias is not None for a in layer.layers]})
        else:
            att: dict[str, Any] = {"type": "attention", "kind": layer.kind,
                                   "residual": layer.residual,
                                   "keys": list(layer.keys) if layer.keys is not None else None,
                                   "heads": len(layer.heads)}
            if layer.causal:
                att["causal"] = True
            if head_biases(layer):
                att["biases"] = head_biases(layer)
            if any(h.scale != 1 for h in layer.heads):
                att["scales"] = [format_rational(h.scale) for h in layer.heads]
            layers.append(att)
    return {"format": SKELETON_FORMAT,
            "input": {"kind": spec.input_kind, "dim": spec.input_dim, "seq_len": spec.seq_len},
            "layers": layers,
            "readout": {"kind": spec.readout.kind, "positions": spec.readout.positions}}


def skeleton_text(spec: NetworkSpec) -> str:
    return json.dumps(skeleton(spec), sort_keys=True, separators=(",", ":"))


def named_matrices(spec: NetworkSpec) -> Iterator[tuple[str, ScaledMatrix, bool]]:
    """``(name, matrix, is_vector)`` for every tensor, in layout order (biases are vectors)."""
    for i, layer in enumerate(spec.layers):
        pre = f"layers.{i}."
        if isinstance(layer, Embedding):
            yield pre + "table", layer.table, False
            if layer.positions is not None:
                yield pre + "positions", layer.positions, False
        elif isinstance(layer, Linear):
            yield from _affine(pre, layer.map)
        elif isinstance(layer, FeedForward):
            for j, a in enumerate(layer.layers):
                yield from _affine(f"{pre}maps.{j}.", a)
        else:
            biases = head_biases(layer)
            for h, head in enumerate(layer.heads):
                for part in ("query", "key", "value", "output"):
                    yield f"{pre}heads.{h}.{part}", getattr(head, part), False
                for part in biases:
                    yield f"{pre}heads.{h}.{part}_bias", getattr(head, f"{part}_bias"), True


def _affine(pre: str, a: Affine) -> Iterator[tuple[str, ScaledMatrix, bool]]:
    yield pre + "weight", a.weight, False
    if a.bias is not None:
        yield pre + "bias", a.bias, True


def _head(pre: str, h: int, mat: Callable[[str], ScaledMatrix],
          vec: Callable[[str], ScaledMatrix], biases: list[str], scale: Fraction) -> Head:
    q, k, v, o = (mat(f"{pre}heads.{h}.{part}") for part in BIAS_PARTS)
    bq, bk, bv, bo = (vec(f"{pre}heads.{h}.{part}_bias") if part in biases else None
                      for part in BIAS_PARTS)
    return Head(q, k, v, o, query_bias=bq, key_bias=bk, value_bias=bv, output_bias=bo,
                scale=scale)


def spec_from_tensors(skel: dict[str, Any], get: Callable[[str, bool], Tensor2D]) -> NetworkSpec:
    """Rebuild the exact spec from ``skel`` and ``get(name, is_vector)`` returning rows of
    exact rationals (a vector as a column); errors name the offending tensor."""
    if not isinstance(skel, dict) or skel.get("format") != SKELETON_FORMAT:
        raise SpecError(f"the network structure is missing or not {SKELETON_FORMAT}")

    def mat(name: str) -> ScaledMatrix:
        rows = get(name, False)
        return ScaledMatrix.from_rows(rows, cols=len(rows[0]) if rows else 0)

    def vec(name: str) -> ScaledMatrix:
        return ScaledMatrix.from_rows(get(name, True), cols=1)

    def affine(pre: str, has_bias: bool) -> Affine:
        return Affine(mat(pre + "weight"), vec(pre + "bias") if has_bias else None)

    layers: list[Layer] = []
    for i, lay in enumerate(skel["layers"]):
        pre = f"layers.{i}."
        kind = lay.get("type")
        if kind == "embedding":
            layers.append(Embedding(mat(pre + "table"),
                                    mat(pre + "positions") if lay.get("positions") else None))
        elif kind == "linear":
            layers.append(Linear(affine(pre, bool(lay["bias"]))))
        elif kind == "feedforward":
            maps = tuple(affine(f"{pre}maps.{j}.", bool(b)) for j, b in enumerate(lay["bias"]))
            layers.append(FeedForward(maps, residual=bool(lay["residual"])))
        elif kind == "attention":
            biases = lay.get("biases") or []
            scales = lay.get("scales") or ["1"] * int(lay["heads"])
            heads = tuple(_head(pre, h, mat, vec, biases, to_rational(
                scales[h], f"layers[{i}].scales[{h}]")) for h in range(int(lay["heads"])))
            keys = tuple(lay["keys"]) if lay.get("keys") is not None else None
            layers.append(Attention(heads, kind=lay["kind"], residual=bool(lay["residual"]),
                                    keys=keys, causal=bool(lay.get("causal", False))))
        else:
            raise SpecError(f"layers[{i}]: unknown layer type {kind!r}")
    inp, ro = skel["input"], skel["readout"]
    return NetworkSpec(input_kind=inp["kind"], input_dim=int(inp["dim"]),
                       seq_len=int(inp["seq_len"]), layers=tuple(layers),
                       readout=Readout(ro["kind"], ro["positions"]))
