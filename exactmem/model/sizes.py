"""Size accounting: the quantities the memorization theorems bound.

* ``params_dense``: every entry of every weight matrix and bias, zeros included (query and
  key matrices of uniform attention are counted although they are zero); positional
  embeddings and attention biases when present; a head's score scale is a constant of the
  architecture, not a parameter, and is not counted;
* ``params_nonzero``: entries that are not zero;
* ``depth``: affine maps on the longest path (an embedding or linear map counts 1, a
  feed-forward block counts its affine maps, an attention layer counts 1);
* ``width``: the largest vector any layer produces, hidden units and ``heads x head size``
  included (Kim et al.'s width, max(m, sH, q));
* ``max_bits``: bit length of the largest reduced numerator or denominator of any weight.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.model.spec import Attention, Embedding, FeedForward, Linear, NetworkSpec


@dataclass(frozen=True, slots=True)
class Sizes:
    params_dense: int
    params_nonzero: int
    depth: int
    width: int
    max_bits: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def matrices(spec: NetworkSpec) -> list[ScaledMatrix]:
    """Every weight matrix and bias of the network, in layer order."""
    out: list[ScaledMatrix] = []
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            out.append(layer.table)
            if layer.positions is not None:
                out.append(layer.positions)
        elif isinstance(layer, Linear):
            out.append(layer.map.weight)
            if layer.map.bias is not None:
                out.append(layer.map.bias)
        elif isinstance(layer, FeedForward):
            for aff in layer.layers:
                out.append(aff.weight)
                if aff.bias is not None:
                    out.append(aff.bias)
        elif isinstance(layer, Attention):
            for h in layer.heads:
                out.extend((h.query, h.key, h.value, h.output))
                out.extend(b for b in (h.query_bias, h.key_bias, h.value_bias, h.output_bias)
                           if b is not None)
    return out


def sizes(spec: NetworkSpec) -> Sizes:
    mats = matrices(spec)
    depth = 0
    width = spec.input_dim if spec.input_kind == "vectors" else 1
    for layer in spec.layers:
        if isinstance(layer, FeedForward):
            depth += len(layer.layers)
            width = max(width, *(a.out_dim for a in layer.layers), layer.in_dim)
        elif isinstance(layer, Attention):
            depth += 1
            width = max(width, layer.in_dim, sum(h.value.shape[0] for h in layer.heads))
        else:
            depth += 1
            width = max(width, layer.out_dim)
    return Sizes(
        params_dense=sum(m.shape[0] * m.shape[1] for m in mats),
        params_nonzero=sum(m.nonzeros() for m in mats),
        depth=depth,
        width=width,
        max_bits=max((m.max_bits() for m in mats), default=0),
    )
