"""The structure of a :class:`NetworkSpec` without its weights (the export layout).

Every export carries this skeleton (torch ``_extra_state``, safetensors metadata, ONNX
metadata) so that a file of plain tensors can be read back as the exact network.  Tensor
names and shapes follow the spec one-to-one, in the spec's column convention (a weight is
``out x in``; a token row ``x`` maps to ``x @ W.T + b``):

* ``layers.{i}.table``                       embedding, ``d x vocab`` (column t embeds token t)
* ``layers.{i}.weight`` / ``.bias``          linear map, ``out x in`` / ``out``
* ``layers.{i}.maps.{j}.weight`` / ``.bias`` feed-forward affine maps
* ``layers.{i}.heads.{h}.query|key|value|output`` attention heads (``s x m``, ``m x s`` output)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from exactmem.arith import ScaledMatrix
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


def skeleton(spec: NetworkSpec) -> dict[str, Any]:
    """The JSON-able structure of ``spec``: input, layer kinds and flags, readout."""
    layers: list[dict[str, Any]] = []
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            layers.append({"type": "embedding"})
        elif isinstance(layer, Linear):
            layers.append({"type": "linear", "bias": layer.map.bias is not None})
        elif isinstance(layer, FeedForward):
            layers.append({"type": "feedforward", "residual": layer.residual,
                           "bias": [a.bias is not None for a in layer.layers]})
        else:
            layers.append({"type": "attention", "kind": layer.kind, "residual": layer.residual,
                           "keys": list(layer.keys) if layer.keys is not None else None,
                           "heads": len(layer.heads)})
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
        elif isinstance(layer, Linear):
            yield from _affine(pre, layer.map)
        elif isinstance(layer, FeedForward):
            for j, a in enumerate(layer.layers):
                yield from _affine(f"{pre}maps.{j}.", a)
        else:
            for h, head in enumerate(layer.heads):
                for part in ("query", "key", "value", "output"):
                    yield f"{pre}heads.{h}.{part}", getattr(head, part), False


def _affine(pre: str, a: Affine) -> Iterator[tuple[str, ScaledMatrix, bool]]:
    yield pre + "weight", a.weight, False
    if a.bias is not None:
        yield pre + "bias", a.bias, True


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
            layers.append(Embedding(mat(pre + "table")))
        elif kind == "linear":
            layers.append(Linear(affine(pre, bool(lay["bias"]))))
        elif kind == "feedforward":
            maps = tuple(affine(f"{pre}maps.{j}.", bool(b)) for j, b in enumerate(lay["bias"]))
            layers.append(FeedForward(maps, residual=bool(lay["residual"])))
        elif kind == "attention":
            heads = tuple(Head(*(mat(f"{pre}heads.{h}.{part}")
                                 for part in ("query", "key", "value", "output")))
                          for h in range(int(lay["heads"])))
            keys = tuple(lay["keys"]) if lay.get("keys") is not None else None
            layers.append(Attention(heads, kind=lay["kind"], residual=bool(lay["residual"]),
                                    keys=keys))
        else:
            raise SpecError(f"layers[{i}]: unknown layer type {kind!r}")
    inp, ro = skel["input"], skel["readout"]
    return NetworkSpec(input_kind=inp["kind"], input_dim=int(inp["dim"]),
                       seq_len=int(inp["seq_len"]), layers=tuple(layers),
                       readout=Readout(ro["kind"], ro["positions"]))
