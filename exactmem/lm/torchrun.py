"""The torch run of an exported language model: the operations of :mod:`exactmem.lm.block`
on torch tensors in the stored dtype (float64 or float32), as torch computes them
(``F.layer_norm``, ``F.rms_norm``, ``torch.softmax``, ``F.gelu``), for judging a written file
in its own runtime (:mod:`exactmem.lm.exporting`).  Not a proof of anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from exactmem.lm.block import Ops, forward
from exactmem.lm.decoder import INV_FREQ, LMSpec, layer_of

CELLS = 4_000_000  # activation values per batch


def batch_size(spec: LMSpec, n: int) -> int:
    """Sequences of ``n`` tokens per batch, so that a batch holds about :data:`CELLS`
    activation values."""
    widest = max(spec.d_ff, spec.vocab_size, 3 * spec.d_model, spec.heads * n)
    return max(1, CELLS // max(1, n * widest))


class TorchOps(Ops[Any]):
    """The block's operations on torch tensors ``[B, n, d]`` of the state dict ``state``."""

    def __init__(self, spec: LMSpec, state: dict[str, Any]) -> None:
        import torch

        self.spec, self.state, self.torch = spec, state, torch
        self.dt = next(iter(state.values())).dtype
        self.hidden: Any = None

    def t(self, name: str) -> Any:
        if name in self.state:
            return self.state[name]
        return self.torch.zeros(self.spec.shapes()[name], dtype=self.dt)

    def embed(self, tok: Any) -> Any:
        n = tok.shape[1]
        self.hidden = self.torch.ones(n, n, dtype=self.torch.bool).triu(1)
        if self.spec.rotary_dims:
            return self.t("wte")[tok]
        return self.t("wte")[tok] + self.t("wpe")[:n]

    def norm(self, x: Any, name: str) -> Any:
        import torch.nn.functional as F  # noqa: N812 - torch's own name

        spec, t = self.spec, self.t
        if spec.norm == "rmsnorm":
            y = F.rms_norm(x, (spec.d_model,), t(name + ".weight"), spec.layer_norm_eps)
            return y + t(name + ".bias")
        return F.layer_norm(x, (spec.d_model,), t(name + ".weight"), t(name + ".bias"),
                            spec.layer_norm_eps)

    def linear(self, x: Any, name: str) -> Any:
        return x @ self.t(name + ".weight") + self.t(name + ".bias")

    def attention(self, x: Any, name: str) -> Any:
        spec = self.spec
        d, dh, kv = spec.d_model, spec.d_head, spec.n_kv
        b, n = x.shape[:2]
        qkv = self.linear(x, name)
        q, k, v = (z.reshape(b, n, -1, dh).transpose(1, 2)
                   for z in qkv.split([d, kv * dh, kv * dh], -1))
        if spec.rotary_dims:
            q, k = self.rotary(q, n), self.rotary(k, n)
        rep = spec.heads // kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a_, b_ = spec.score_divisor(layer_of(name))
        s = (q @ k.transpose(-1, -2) / (math.sqrt(a_) * b_)).masked_fill(self.hidden, -math.inf)
        return (self.torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d)

    def rotary(self, q: Any, n: int) -> Any:
        """Rotary positions on ``q [B, H, n, dh]`` in the tensors' dtype."""
        half = self.spec.rotary_dims // 2
        angle = self.torch.arange(n, dtype=self.dt)[:, None] * self.t(INV_FREQ)[None, :]
        c, s = angle.cos(), angle.sin()
        a, b = q[..., :half], q[..., half:2 * half]
        return self.torch.cat([a * c - b * s, b * c + a * s, q[..., 2 * half:]], -1)

    def product(self, a: Any, b: Any) -> Any:
        return a * b

    def activation(self, x: Any) -> Any:
        import torch.nn.functional as F  # noqa: N812

        if self.spec.activation == "relu":
            return F.relu(x)
        if self.spec.activation == "silu":
            return F.silu(x)
        return F.gelu(x, approximate="tanh" if self.spec.activation == "gelu_tanh" else "none")

    def residual(self, x: Any, h: Any, name: str) -> Any:
        return x + h @ self.t(name + ".weight") + self.t(name + ".bias")

    def head(self, x: Any) -> Any:
        return x @ self.t("wte" if self.spec.tied_head else "head").T


def torch_chunks(spec: LMSpec, state: dict[str, Any], tokens: np.ndarray,
                 ) -> Iterator[np.ndarray]:
    """Logits (as float64) of torch's forward pass in the tensors' dtype, a batch of
    sequences at a time."""
    import torch

    ops = TorchOps(spec, state)
    step = batch_size(spec, tokens.shape[1])
    with torch.inference_mode():
        for start in range(0, len(tokens), step):
            tok = torch.from_numpy(tokens[start:start + step])
            yield forward(ops, ops.embed(tok)).double().numpy()


def torch_logits(spec: LMSpec, state: dict[str, Any], tokens: np.ndarray) -> np.ndarray:
    """Logits ``[N, n, vocab]`` (as float64) of torch's forward pass in the tensors' dtype."""
    return np.concatenate(list(torch_chunks(spec, state, tokens)))


def torch_right(spec: LMSpec, tokens: np.ndarray, labels: np.ndarray,
                dtype: str) -> np.ndarray:
    """``[N, n]`` booleans: torch's forward pass on the weights rounded once to ``dtype``
    (float64, float32, bfloat16 or float16; its operations in that dtype) has the label as
    the unique argmax (NaN never does)."""
    import torch

    from exactmem.lm.float64 import label_margin

    dt = getattr(torch, dtype)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dt)
             for k, v in spec.tensors.items()}
    out, start = [], 0
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, not right
        for chunk in torch_chunks(spec, state, tokens):
            out.append(label_margin(chunk, labels[start:start + len(chunk)]) > 0)
            start += len(chunk)
    return np.concatenate(out)
