"""Decoder language models (GPT-2, nanoGPT, torch ``nn.TransformerEncoderLayer`` stacks with
a causal mask): the shape, the stored weights, their exact values.

The function (docs/trained-models.md, "Semantics"): for tokens ``t_0 .. t_{n-1}``,
``x_p = wte[t_p] + wpe[p]``; per layer ``x += Attn(LN1(x))`` then ``x += MLP(LN2(x))``; the
logits are ``LNf(x_p) head^T`` (``head = wte`` when tied).  With ``norm_first=False``
(post-LN, torch's default encoder layer) a layer is ``x = LN1(x + Attn(x))`` then ``x =
LN2(x + MLP(x))``; with ``final_norm=False`` the logits are ``x_p head^T``.  ``LN(x) = (x - mean) /
sqrt(var + eps) * g + b`` with the population variance and ``eps`` the stored number, or, with
``norm="rmsnorm"``, ``RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g + b`` (no centring; ``b`` zero
unless stored); ``Attn``
is causal multi-head softmax attention, scores ``q.k / sqrt(d_head)``, with biases; ``MLP(x) =
GELU(x W_fc + b_fc) W_proj + b_proj``, GELU in the tanh form (GPT-2's ``gelu_new``) or the erf
form (``nn.GELU()``), or ReLU, or SiLU ``x / (1 + e^-x)``.  Linear maps are ``x W + b``
with ``W`` stored ``[in, out]``.

The architectures of GPT-NeoX and LLaMA (fields defaulting to GPT-2's function; the
certificate header carries each one that differs, :func:`exactmem.lm.certfile.options_json`):
``rotary_dims`` > 0 replaces ``wpe`` by
rotary positions on the first ``rotary_dims`` of each head's query and key dimensions, with
the frequencies ``omega_j`` = ``rope.inv_freq[j]`` (exact stored floats): at position ``p``,
``q'_j = q_j cos(p omega_j) - q_{j+r/2} sin(p omega_j)``, ``q'_{j+r/2} = q_{j+r/2} cos(p
omega_j) + q_j sin(p omega_j)`` (``j < r/2``, Hugging Face's ``rotate_half`` convention),
the exact real cos and sin; ``kv_heads`` < ``heads`` is grouped-query attention (query head
``h`` uses key/value head ``h // (heads / kv_heads)``; ``attn`` is ``q | k | v`` of widths
``d``, ``kv_heads d_head``, ``kv_heads d_head``); ``parallel_residual``: ``x + Attn(LN1(x)) +
MLP(LN2(x))``; ``gated_mlp``: ``MLP(x) = (act(x W_gate + b_gate) * (x W_fc + b_fc)) W_proj +
b_proj`` (SwiGLU with SiLU); ``score_scale`` ``False``: scores ``q.k`` without
``1/sqrt(d_head)``; ``inverse_layer_scale``: scores of block ``i`` also divided by ``i + 1``
(GPT-2's ``scale_attn_by_inverse_layer_idx``).  Every
stored weight is a binary float, so it *is* a dyadic rational; :meth:`LMSpec.exact` gives it
as an integer over one power of two per tensor, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from exactmem.errors import SpecError

Activation = Literal["gelu_tanh", "gelu_erf", "relu", "silu"]
ACTIVATIONS = ("gelu_tanh", "gelu_erf", "relu", "silu")
#: the activations an ``exactmem.lm-certificate/1`` carries (the checker proves them); an
#: activation outside it runs in the producer domains but no certificate is written with it
CERTIFIED_ACTIVATIONS = ("gelu_tanh", "gelu_erf", "relu", "silu")
Norm = Literal["layernorm", "rmsnorm"]
NORMS = ("layernorm", "rmsnorm")
#: The tensors of a block: each name's weight shape in the dimensions ``d`` (``d_model``),
#: ``3d`` (q | k | v) and ``f`` (``d_ff``); its bias has the weight's last dimension.
BLOCK: dict[str, tuple[str, ...]] = {
    "ln1": ("d",), "attn": ("d", "3d"), "attn.proj": ("d", "d"),
    "ln2": ("d",), "mlp.fc": ("d", "f"), "mlp.proj": ("f", "d")}
GATE: dict[str, tuple[str, ...]] = {"mlp.gate": ("d", "f")}  # a gated MLP's extra tensor
INV_FREQ = "rope.inv_freq"  # the rotary frequencies omega_j, ``[rotary_dims / 2]``


def layer_of(name: str) -> int:
    """The block index of a tensor name ``h{i}.<...>``."""
    return int(name.split(".", 1)[0][1:])


@dataclass(frozen=True, slots=True)
class LMSpec:
    """A decoder: its shape and its tensors (float64 arrays holding the stored floats
    exactly; names and shapes in :meth:`shapes`).  Bias tensors may be absent (zero).
    ``kv_heads``, ``rotary_dims``, ``parallel_residual``, ``gated_mlp``, ``score_scale`` and
    ``inverse_layer_scale``: the module docstring (GPT-2's function by default).
    ``norm``: every norm of the model (``ln1``, ``ln2``, ``lnf``) is a LayerNorm or every one
    an RMSNorm; ``layer_norm_eps`` is the eps of all of them."""

    vocab_size: int
    context: int
    d_model: int
    heads: int
    layers: int
    d_ff: int
    activation: Activation
    layer_norm_eps: float
    tied_head: bool
    tensors: dict[str, np.ndarray] = field(repr=False)
    norm_first: bool = True
    final_norm: bool = True
    norm: Norm = "layernorm"
    kv_heads: int = 0  # 0: as many as ``heads``
    rotary_dims: int = 0  # 0: learned positions ``wpe``
    parallel_residual: bool = False
    gated_mlp: bool = False
    score_scale: bool = True
    inverse_layer_scale: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise SpecError(f"{name}: expected a positive integer, found {v!r}")
        if self.d_model % self.heads:
            raise SpecError(f"heads: {self.heads} does not divide d_model = {self.d_model}")
        if self.activation not in ACTIVATIONS:
            raise SpecError(f"activation: expected one of {', '.join(ACTIVATIONS)}, found "
                            f"{self.activation!r}")
        if self.norm not in NORMS:
            raise SpecError(f"norm: expected one of {', '.join(NORMS)}, found {self.norm!r}")
        kv = self.kv_heads
        if type(kv) is not int or kv < 0 or (kv and self.heads % kv):
            raise SpecError(f"kv_heads: expected 0 or a divisor of heads = {self.heads}, "
                            f"found {kv!r}")
        r = self.rotary_dims
        if type(r) is not int or r < 0 or r % 2 or r > self.d_head:
            raise SpecError(f"rotary_dims: expected an even number from 0 to d_head = "
                            f"{self.d_head}, found {r!r}")
        if self.parallel_residual and not self.norm_first:
            raise SpecError("parallel_residual: needs norm_first (a pre-LN block)")
        for name in ("norm_first", "final_norm", "parallel_residual", "gated_mlp",
                     "score_scale", "inverse_layer_scale"):
            if type(getattr(self, name)) is not bool:
                raise SpecError(f"{name}: expected a bool, found {getattr(self, name)!r}")
        if not np.isfinite(self.layer_norm_eps) or self.layer_norm_eps < 0:
            raise SpecError(f"layer_norm_eps: expected a finite number >= 0, found "
                            f"{self.layer_norm_eps!r}")
        want = self.shapes()
        required, _ = self.names()
        for name in required:
            if name not in self.tensors:
                raise SpecError(f"tensor {name}: missing")
        for name, t in self.tensors.items():
            if name not in want:
                raise SpecError(f"tensor {name}: not a tensor of this model")
            if list(t.shape) != want[name]:
                raise SpecError(f"tensor {name}: shape {list(t.shape)}, expected {want[name]}")
            if not np.isfinite(t).all():
                bad = np.argwhere(~np.isfinite(t))[0].tolist()
                raise SpecError(f"tensor {name}: a NaN or infinite weight at index {bad}")
        if r and not (self.tensors[INV_FREQ] > 0).all():
            raise SpecError(f"tensor {INV_FREQ}: expected positive frequencies")

    @property
    def n_kv(self) -> int:
        """Key/value heads (``heads`` unless grouped-query attention)."""
        return self.kv_heads or self.heads

    def block(self) -> dict[str, tuple[str, ...]]:
        """The tensors of a block (:data:`BLOCK`, with :data:`GATE` for a gated MLP)."""
        return {**BLOCK, **GATE} if self.gated_mlp else BLOCK

    def score_divisor(self, layer: int) -> tuple[int, int]:
        """``(a, b)``: block ``layer``'s attention scores are ``q.k / (sqrt(a) b)``."""
        return (self.d_head if self.score_scale else 1,
                layer + 1 if self.inverse_layer_scale else 1)

    def uncertified(self) -> list[str]:
        """The parts of this function the certificate format does not carry yet (the checker
        does not prove them), each named as the config or the docs name it."""
        out = []
        if self.activation not in CERTIFIED_ACTIVATIONS:
            out.append(f"activation {self.activation!r}")
        return out

    def names(self) -> tuple[list[str], list[str]]:
        """``(required, optional)`` tensor names (optional: the biases)."""
        req: list[str] = ["wte", INV_FREQ if self.rotary_dims else "wpe"]
        opt: list[str] = []
        if self.final_norm:
            req, opt = req + ["lnf.weight"], ["lnf.bias"]
        for i in range(self.layers):
            req += [f"h{i}.{t}.weight" for t in self.block()]
            opt += [f"h{i}.{t}.bias" for t in self.block()]
        if not self.tied_head:
            req.append("head")
        return req, opt

    def shapes(self) -> dict[str, list[int]]:
        """Every tensor's shape, the block's from :data:`BLOCK` (``3d``: ``q | k | v``,
        ``d + 2 kv_heads d_head``)."""
        v, t, d, f = self.vocab_size, self.context, self.d_model, self.d_ff
        size = {"d": d, "3d": d + 2 * self.n_kv * self.d_head, "f": f}
        out = {"wte": [v, d]}
        if self.rotary_dims:
            out[INV_FREQ] = [self.rotary_dims // 2]
        else:
            out["wpe"] = [t, d]
        if self.final_norm:
            out.update({"lnf.weight": [d], "lnf.bias": [d]})
        if not self.tied_head:
            out["head"] = [v, d]
        for i in range(self.layers):
            for name, dims in self.block().items():
                out[f"h{i}.{name}.weight"] = [size[k] for k in dims]
                out[f"h{i}.{name}.bias"] = [size[dims[-1]]]
        return out

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def params(self) -> int:
        return sum(int(t.size) for t in self.tensors.values())

    def get(self, name: str) -> np.ndarray:
        """The tensor ``name``; an absent bias is zeros."""
        t = self.tensors.get(name)
        return np.zeros(self.shapes()[name]) if t is None else t

    def exact(self, name: str) -> tuple[list[int], int]:
        """Tensor ``name`` exactly: flat numerators (row-major) and the least scale ``E``
        with every entry ``numerator / 2**E``."""
        pairs = [float(x).as_integer_ratio() for x in self.tensors[name].ravel().tolist()]
        e = max(q.bit_length() - 1 for _, q in pairs)
        nums = [p << (e - (q.bit_length() - 1)) for p, q in pairs]
        while e and not any(p & 1 for p in nums):
            nums = [p >> 1 for p in nums]
            e -= 1
        return nums, e

    def eps_fraction(self) -> Fraction:
        """``eps`` as the exact rational its float is."""
        return Fraction(self.layer_norm_eps)
