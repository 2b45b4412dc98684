"""The searched architecture family and its shape knobs.

A shape fixes ``E_out o (FF_L o ATT_L) o ... o (FF_1 o ATT_1) o E_in`` (Kajitsuka & Sato
eq. (4), hardmax attention eq. (12)):

* ``E_in``: a free embedding table (token ids) or a free linear map without bias (vectors)
  into ``d_model`` dimensions;
* each block: hardmax attention with ``heads`` heads of size ``head_dim`` (residual
  optional), then a one-hidden-layer ReLU feed-forward of width ``ff_width`` with biases
  (residual optional; width 0 means no feed-forward);
* ``E_out``: a linear map with bias to one scalar (``readout="scalar"``) or to ``C`` class
  scores (``readout="argmax"``).

``params`` is the dense parameter count of the :class:`~exactmem.model.NetworkSpec` the
witness builder emits (:func:`exactmem.model.sizes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.sizes import sizes
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

SearchReadout = Literal["scalar", "argmax"]
SHAPE_KNOBS = ("layers", "heads", "d_model", "head_dim", "ff_width", "residual", "readout")


@dataclass(frozen=True, slots=True)
class Shape:
    """The shape knobs of a searched network."""

    layers: int = 1
    heads: int = 1
    d_model: int = 1
    head_dim: int = 1
    ff_width: int = 0
    residual: bool = True
    readout: SearchReadout = "argmax"

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "d_model", "head_dim"):
            if getattr(self, name) < 1:
                raise SpecError(f"shape: {name} must be >= 1, found {getattr(self, name)}")
        if self.ff_width < 0:
            raise SpecError(f"shape: ff_width must be >= 0, found {self.ff_width}")
        if self.readout not in ("scalar", "argmax"):
            raise SpecError(f"shape: readout must be 'scalar' or 'argmax', found {self.readout!r}")

    @property
    def full_rank_heads(self) -> bool:
        """``head_dim >= d_model``: ``W_K^T W_Q`` and ``W_O W_V`` are arbitrary matrices."""
        return self.head_dim >= self.d_model

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(obj: dict[str, Any]) -> Shape:
        return Shape(**{k: obj[k] for k in SHAPE_KNOBS if k in obj})

    def label(self) -> str:
        res = "res" if self.residual else "nores"
        return (f"L{self.layers} H{self.heads} m{self.d_model} s{self.head_dim} "
                f"q{self.ff_width} {res}")


def layers_of(shape: Shape, input_kind: str, input_dim: int, out_dim: int,
              mats: dict[str, ScaledMatrix] | None = None) -> tuple[Layer, ...]:
    """The layer list of a shape; weights from ``mats`` (by parameter name) or zero."""
    m, s = shape.d_model, shape.head_dim

    def get(name: str, rows: int, cols: int) -> ScaledMatrix:
        if mats is not None and name in mats:
            got = mats[name]
            if got.shape != (rows, cols):
                raise SpecError(f"parameter {name}: shape {got.shape}, expected ({rows}, {cols})")
            return got
        return ScaledMatrix.zeros(rows, cols)

    out: list[Layer] = []
    if input_kind == "token-ids":
        out.append(Embedding(get("embed", m, input_dim)))
    else:
        out.append(Linear(Affine(get("embed", m, input_dim))))
    for layer in range(shape.layers):
        heads = []
        for h in range(shape.heads):
            p = f"att{layer}.{h}."
            heads.append(Head(query=get(p + "Q", s, m), key=get(p + "K", s, m),
                              value=get(p + "V", s, m), output=get(p + "O", m, s)))
        out.append(Attention(tuple(heads), kind="hardmax", residual=shape.residual))
        if shape.ff_width:
            q = shape.ff_width
            p = f"ff{layer}."
            out.append(FeedForward((Affine(get(p + "W1", q, m), get(p + "b1", q, 1)),
                                    Affine(get(p + "W2", m, q), get(p + "b2", m, 1))),
                                   residual=shape.residual))
    out.append(Linear(Affine(get("out.W", out_dim, m), get("out.b", out_dim, 1))))
    return tuple(out)


def spec_of(shape: Shape, input_kind: str, input_dim: int, seq_len: int, out_dim: int,
            mats: dict[str, ScaledMatrix] | None = None) -> NetworkSpec:
    """The :class:`NetworkSpec` of ``shape`` (next-token: read at the last position)."""
    return NetworkSpec(input_kind, input_dim, seq_len,  # type: ignore[arg-type]
                       layers_of(shape, input_kind, input_dim, out_dim, mats),
                       Readout(shape.readout, "last"))


def params_of(shape: Shape, input_kind: str, input_dim: int, out_dim: int) -> int:
    """Dense parameter count (zeros included) of the emitted network."""
    return sizes(spec_of(shape, input_kind, input_dim, 1, out_dim)).params_dense


def nests_in(small: Shape, big: Shape) -> bool:
    """Every network of ``small`` is (after zero padding) a network of ``big``.

    Padding adds zero stream coordinates, zero-value heads and hidden units with zero
    output weights.  An extra block (or a feed-forward where there was none) is the
    identity only through the residual, so without residual those knobs must agree.
    """
    if small.residual != big.residual or small.readout != big.readout:
        return False
    if not (small.heads <= big.heads and small.d_model <= big.d_model
            and small.head_dim <= big.head_dim and small.ff_width <= big.ff_width
            and small.layers <= big.layers):
        return False
    if small.residual:
        return True
    return small.layers == big.layers and (small.ff_width == 0) == (big.ff_width == 0)


def output_dim(ds: Dataset, shape: Shape) -> int:
    """Readout rows: 1 for a scalar readout, else one per class (at least 2)."""
    return 1 if shape.readout == "scalar" else max(2, ds.num_classes)
