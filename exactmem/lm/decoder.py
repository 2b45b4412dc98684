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
form (``nn.GELU()``), or ReLU (or SiLU ``x / (1 + e^-x)``, not yet certified).  Linear maps
are ``x W + b`` with ``W`` stored ``[in, out]``.  Every
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
#: the activations an ``exactmem.lm-certificate/1`` carries (the checker's); ``silu``
#: (``x / (1 + e^-x)``, LLaMA's SwiGLU gate) runs in every producer domain but no importer
#: reads it and no certificate is written with it until the checker proves it
CERTIFIED_ACTIVATIONS = ("gelu_tanh", "gelu_erf", "relu")
Norm = Literal["layernorm", "rmsnorm"]
NORMS = ("layernorm", "rmsnorm")
#: The tensors of a block: each name's weight shape in the dimensions ``d`` (``d_model``),
#: ``3d`` (q | k | v) and ``f`` (``d_ff``); its bias has the weight's last dimension.
BLOCK: dict[str, tuple[str, ...]] = {
    "ln1": ("d",), "attn": ("d", "3d"), "attn.proj": ("d", "d"),
    "ln2": ("d",), "mlp.fc": ("d", "f"), "mlp.proj": ("f", "d")}


@dataclass(frozen=True, slots=True)
class LMSpec:
    """A pre-LN decoder: its shape and its tensors (float64 arrays holding the stored floats
    exactly; names and shapes in :meth:`shapes`).  Bias tensors may be absent (zero).
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
        for name in ("norm_first", "final_norm"):
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

    def names(self) -> tuple[list[str], list[str]]:
        """``(required, optional)`` tensor names (optional: the biases)."""
        req, opt = ["wte", "wpe"], []
        if self.final_norm:
            req, opt = req + ["lnf.weight"], ["lnf.bias"]
        for i in range(self.layers):
            req += [f"h{i}.{t}.weight" for t in BLOCK]
            opt += [f"h{i}.{t}.bias" for t in BLOCK]
        if not self.tied_head:
            req.append("head")
        return req, opt

    def shapes(self) -> dict[str, list[int]]:
        """Every tensor's shape, the block's from :data:`BLOCK`."""
        v, t, d, f = self.vocab_size, self.context, self.d_model, self.d_ff
        size = {"d": d, "3d": 3 * d, "f": f}
        out = {"wte": [v, d], "wpe": [t, d]}
        if self.final_norm:
            out.update({"lnf.weight": [d], "lnf.bias": [d]})
        if not self.tied_head:
            out["head"] = [v, d]
        for i in range(self.layers):
            for name, dims in BLOCK.items():
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
