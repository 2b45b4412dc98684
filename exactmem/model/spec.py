"""The exact network description: :class:`NetworkSpec` and its layers.

Semantics follow Kajitsuka & Sato (ICLR 2025) §3.2, eqs. (1)-(4):

* a sequence is a ``d x n`` matrix whose columns are tokens; every layer acts on columns;
* attention is column-wise (eq. 2): scores ``(W_K Z)^T (W_Q Z)`` have keys on rows and
  queries on columns, no ``1/sqrt(s)`` scaling by default; hardmax (eq. 1) splits the weight
  uniformly over *all* tied maximizers; ``uniform`` attention is attention whose scores
  are all zero (so every key gets weight ``1/#keys``, exactly rational);
* what trained Transformers add, each optional with a default that changes nothing
  (docs/architecture.md): learned absolute positional embeddings added to the token
  embedding, biases of the query/key/value/output projections, a per-head rational score
  scale (e.g. the float32 constant ``1/sqrt(d_h)``, a dyadic rational), causal masks;
* feed-forward blocks are token-wise ReLU networks of any depth (no ReLU after the last
  affine map), with an optional residual;
* the readout reads one output vector per read position: a scalar that must *equal* the
  label, or ``argmax`` over classes where a tie is a failure.

All weights are :class:`~exactmem.arith.ScaledMatrix` values: exact by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError

AttentionKind = Literal["softmax", "hardmax", "uniform"]
ReadoutKind = Literal["scalar", "argmax"]
ReadPositions = Literal["last", "first", "every"]
InputKind = Literal["token-ids", "vectors"]

ATTENTION_KINDS: tuple[str, ...] = ("softmax", "hardmax", "uniform")
READOUT_KINDS: tuple[str, ...] = ("scalar", "argmax")
READ_POSITIONS: tuple[str, ...] = ("last", "first", "every")


def _bias_ok(bias: ScaledMatrix | None, rows: int, what: str) -> None:
    if bias is not None and bias.shape != (rows, 1):
        raise SpecError(f"{what}: bias has shape {bias.shape}, expected ({rows}, 1)")


@dataclass(frozen=True, slots=True)
class Embedding:
    """Token ids to vectors: column ``t`` of ``table`` (``dim x vocab``) embeds token ``t``;
    ``positions`` (``dim x n``, optional) adds column ``k`` at position ``k`` (learned
    absolute positional embeddings)."""

    table: ScaledMatrix
    positions: ScaledMatrix | None = None

    def __post_init__(self) -> None:
        if self.positions is not None and self.positions.shape[0] != self.table.shape[0]:
            raise SpecError(f"positional embeddings have {self.positions.shape[0]} rows, the "
                            f"token table {self.table.shape[0]}")

    @property
    def in_dim(self) -> int:
        return self.table.cols

    @property
    def out_dim(self) -> int:
        return self.table.shape[0]


@dataclass(frozen=True, slots=True)
class Affine:
    """``x -> W x + b`` applied to one token (column)."""

    weight: ScaledMatrix
    bias: ScaledMatrix | None = None

    def __post_init__(self) -> None:
        _bias_ok(self.bias, self.weight.shape[0], "affine map")

    @property
    def in_dim(self) -> int:
        return self.weight.cols

    @property
    def out_dim(self) -> int:
        return self.weight.shape[0]


@dataclass(frozen=True, slots=True)
class Linear:
    """A token-wise affine map (``E_in``, ``E_out``, projections)."""

    map: Affine

    @property
    def in_dim(self) -> int:
        return self.map.in_dim

    @property
    def out_dim(self) -> int:
        return self.map.out_dim


@dataclass(frozen=True, slots=True)
class FeedForward:
    """Token-wise ReLU network ``A_L o relu o ... o relu o A_1`` (eq. 3), residual optional."""

    layers: tuple[Affine, ...]
    residual: bool = False

    def __post_init__(self) -> None:
        if not self.layers:
            raise SpecError("a feed-forward block needs at least one affine map")
        for i, (a, b) in enumerate(zip(self.layers, self.layers[1:], strict=False)):
            if a.out_dim != b.in_dim:
                raise SpecError(f"feed-forward maps {i} and {i + 1} do not chain: "
                                f"{a.out_dim} outputs feed {b.in_dim} inputs")
        if self.residual and self.in_dim != self.out_dim:
            raise SpecError(f"residual feed-forward must keep the dimension, "
                            f"found {self.in_dim} -> {self.out_dim}")

    @property
    def in_dim(self) -> int:
        return self.layers[0].in_dim

    @property
    def out_dim(self) -> int:
        return self.layers[-1].out_dim


@dataclass(frozen=True, slots=True)
class Head:
    """One attention head: ``W_Q, W_K, W_V`` are ``s x m``, ``W_O`` is ``m x s`` (eq. 2).

    Optional (defaults change nothing): biases ``b_Q, b_K, b_V`` (``s x 1``) and ``b_O``
    (``m x 1``), and a positive rational ``scale``.  The head computes, at query ``j``,
    ``W_O sum_i a_ij (W_V z_i + b_V) + b_O`` with ``a_.j = sigma(scale * (W_K z_i + b_K) .
    (W_Q z_j + b_Q))``; the weights sum to 1, so this is ``W_O W_V Z a_.j + (W_O b_V + b_O)``.
    """

    query: ScaledMatrix
    key: ScaledMatrix
    value: ScaledMatrix
    output: ScaledMatrix
    query_bias: ScaledMatrix | None = None
    key_bias: ScaledMatrix | None = None
    value_bias: ScaledMatrix | None = None
    output_bias: ScaledMatrix | None = None
    scale: Fraction = Fraction(1)

    def __post_init__(self) -> None:
        s, m = self.value.shape
        if self.query.shape != self.key.shape:
            raise SpecError(f"query {self.query.shape} and key {self.key.shape} shapes differ")
        if self.query.cols != m:
            raise SpecError(f"query/key read {self.query.cols} dims, value reads {m}")
        if self.output.shape != (m, s):
            raise SpecError(f"output matrix has shape {self.output.shape}, expected ({m}, {s})")
        _bias_ok(self.query_bias, self.query.shape[0], "query projection")
        _bias_ok(self.key_bias, self.key.shape[0], "key projection")
        _bias_ok(self.value_bias, s, "value projection")
        _bias_ok(self.output_bias, m, "output projection")
        if not isinstance(self.scale, Fraction) or self.scale <= 0:
            raise SpecError(f"a head's score scale must be a positive Fraction, "
                            f"found {self.scale!r}")

    @property
    def dim(self) -> int:
        return self.value.cols

    def scores_are_zero(self) -> bool:
        """True when the weights are uniform: ``W_K = 0`` (scores constant over keys) or
        ``W_Q = 0`` without a query bias (scores zero)."""
        return self.key.is_zero() or (self.query.is_zero() and
                                      (self.query_bias is None or self.query_bias.is_zero()))

    def extended(self) -> bool:
        """True when a bias or a scale other than 1 is present."""
        return self.scale != 1 or any(b is not None for b in (
            self.query_bias, self.key_bias, self.value_bias, self.output_bias))

    def constant(self) -> ScaledMatrix | None:
        """``W_O b_V + b_O`` (``m x 1``), the head's output shift, or ``None``."""
        c = self.output.matmul(self.value_bias) if self.value_bias is not None else None
        if self.output_bias is None:
            return c
        if c is None:
            return self.output_bias
        return ScaledMatrix.from_rows(
            [[x + y] for x, y in zip(c.column_values(), self.output_bias.column_values(),
                                     strict=True)], cols=1)


@dataclass(frozen=True, slots=True)
class Attention:
    """Multi-head attention ``Z + sum_h W_O W_V Z sigma[(W_K Z)^T (W_Q Z)]`` (eq. 2).

    ``keys``: the key positions every query attends to (``None`` = all positions);
    e.g. Mahdavi et al.'s query at position 0 attends to positions ``1..n-1`` only.
    ``causal``: the query at position ``j`` attends only to keys ``i <= j`` (among ``keys``;
    masked keys get weight exactly 0).  ``residual`` adds the input ``Z``.
    """

    heads: tuple[Head, ...]
    kind: AttentionKind = "hardmax"
    residual: bool = True
    keys: tuple[int, ...] | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        if not self.heads:
            raise SpecError("an attention layer needs at least one head")
        if self.kind not in ATTENTION_KINDS:
            raise SpecError(f"attention kind must be one of {ATTENTION_KINDS}, found {self.kind!r}")
        dims = {h.dim for h in self.heads}
        if len(dims) != 1:
            raise SpecError(f"all heads must read the same model dimension, found {sorted(dims)}")
        if self.kind == "uniform" and not all(h.scores_are_zero() for h in self.heads):
            raise SpecError("uniform attention needs zero query or key weights in every head")
        if self.keys is not None and (not self.keys or min(self.keys) < 0):
            raise SpecError(f"key positions must be a non-empty list of indices >= 0: {self.keys}")
        if self.causal and self.keys is not None and self.keys[0] != 0:
            raise SpecError("a causal layer with listed keys must include position 0, so "
                            "every query has a key")

    def keys_of(self, n: int, query: int) -> list[int]:
        """The key positions the query at ``query`` attends to (sequence length ``n``)."""
        keys = list(self.keys) if self.keys is not None else list(range(n))
        return [p for p in keys if p <= query] if self.causal else keys

    def extended(self) -> bool:
        """True when the layer uses a causal mask, a bias or a scale."""
        return self.causal or any(h.extended() for h in self.heads)

    @property
    def in_dim(self) -> int:
        return self.heads[0].dim

    @property
    def out_dim(self) -> int:
        return self.in_dim


Layer = Embedding | Linear | FeedForward | Attention


@dataclass(frozen=True, slots=True)
class Readout:
    """How labels are read: ``scalar`` (output == label exactly) or ``argmax`` (unique max)."""

    kind: ReadoutKind = "scalar"
    positions: ReadPositions = "last"

    def __post_init__(self) -> None:
        if self.kind not in READOUT_KINDS:
            raise SpecError(f"readout kind must be one of {READOUT_KINDS}, found {self.kind!r}")
        if self.positions not in READ_POSITIONS:
            raise SpecError(f"read positions must be one of {READ_POSITIONS}, "
                            f"found {self.positions!r}")


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """A complete exact network: input kind, layers in order, readout.

    ``input_dim`` is the vocabulary size for token ids, the token dimension for vectors.
    ``seq_len`` is the sequence length ``n`` the network was built for (uniform attention
    divides by the number of keys, so it is part of the semantics).
    """

    input_kind: InputKind
    input_dim: int
    seq_len: int
    layers: tuple[Layer, ...]
    readout: Readout = field(default_factory=Readout)

    def __post_init__(self) -> None:
        if self.input_kind not in ("token-ids", "vectors"):
            raise SpecError(f"input kind must be 'token-ids' or 'vectors', "
                            f"found {self.input_kind!r}")
        if self.seq_len < 1 or self.input_dim < 1:
            raise SpecError("seq_len and input_dim must be positive")
        dim = self.input_dim
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Embedding):
                if i != 0 or self.input_kind != "token-ids":
                    raise SpecError(f"layer {i}: an embedding must be the first layer of a "
                                    f"token-ids network")
                if layer.positions is not None and layer.positions.cols != self.seq_len:
                    raise SpecError(f"layer {i}: {layer.positions.cols} positional embeddings "
                                    f"for n = {self.seq_len}")
            elif i == 0 and self.input_kind == "token-ids":
                raise SpecError("a token-ids network must start with an embedding layer")
            if isinstance(layer, Attention) and layer.keys is not None and \
                    max(layer.keys) >= self.seq_len:
                raise SpecError(f"layer {i}: key position {max(layer.keys)} >= n = {self.seq_len}")
            if layer.in_dim != dim:
                raise SpecError(f"layer {i} ({type(layer).__name__}) reads {layer.in_dim} dims, "
                                f"the previous layer gives {dim}")
            dim = layer.out_dim
        if self.readout.kind == "scalar" and dim != 1:
            raise SpecError(f"a scalar readout needs output dimension 1, the network gives {dim}")

    @property
    def out_dim(self) -> int:
        return self.layers[-1].out_dim if self.layers else self.input_dim

    def extended(self) -> bool:
        """True when the network uses positional embeddings, attention biases, score scales
        or causal masks (the float-exact rule and the precision report do not cover them)."""
        return any((isinstance(la, Embedding) and la.positions is not None) or
                   (isinstance(la, Attention) and la.extended()) for la in self.layers)

    def read_positions(self) -> tuple[int, ...]:
        """Indices of the positions whose outputs carry labels."""
        if self.readout.positions == "last":
            return (self.seq_len - 1,)
        if self.readout.positions == "first":
            return (0,)
        return tuple(range(self.seq_len))
