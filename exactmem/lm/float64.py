"""The float64 forward pass of an :class:`~exactmem.lm.decoder.LMSpec` (numpy).

Not a proof of anything: it labels a dataset with the model's own argmax, and it is the
spec's side of the cross-check against the checkpoint's own torch forward pass (an importer
that maps a tensor wrongly shows up as disagreeing logits).
"""

from __future__ import annotations

import math

import numpy as np

from exactmem.lm.block import Ops, forward
from exactmem.lm.decoder import INV_FREQ, LMSpec, layer_of


def _gelu(spec: LMSpec, x: np.ndarray) -> np.ndarray:
    if spec.activation == "relu":
        return np.maximum(x, 0.0)
    if spec.activation == "silu":
        return x / (1 + np.exp(-x))
    if spec.activation == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


class Float64Ops(Ops[np.ndarray]):
    """The operations of :mod:`exactmem.lm.block` in float64 numpy on ``[N, n, d]``."""

    def __init__(self, spec: LMSpec) -> None:
        self.spec = spec

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        if self.spec.rotary_dims:
            return self.spec.get("wte")[tokens]
        return self.spec.get("wte")[tokens] + self.spec.get("wpe")[:tokens.shape[1]][None]

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        spec = self.spec
        if spec.norm == "rmsnorm":
            ms = (x * x).mean(-1, keepdims=True)
            return x / np.sqrt(ms + spec.layer_norm_eps) * spec.get(name + ".weight") \
                + spec.get(name + ".bias")
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + spec.layer_norm_eps) * spec.get(name + ".weight") \
            + spec.get(name + ".bias")

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.spec.get(name + ".weight") + self.spec.get(name + ".bias")

    def attention(self, x: np.ndarray, name: str) -> np.ndarray:
        spec = self.spec
        h = spec.heads
        n = x.shape[1]
        q, k, v = split_heads(spec, self.linear(x, name))
        if spec.rotary_dims:
            c, s_ = rotary_tables(spec, n)
            q, k = rotate(q, c, s_), rotate(k, c, s_)
        rep = h // spec.n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        a_, b_ = spec.score_divisor(layer_of(name))
        s = q @ k.transpose(0, 1, 3, 2) / (math.sqrt(a_) * b_)
        s[..., np.triu(np.ones((n, n), dtype=bool), 1)] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        return (a @ v).transpose(0, 2, 1, 3).reshape(x.shape)

    def activation(self, x: np.ndarray) -> np.ndarray:
        return _gelu(self.spec, x)

    def product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a * b

    def residual(self, x: np.ndarray, h: np.ndarray, name: str) -> np.ndarray:
        return x + h @ self.spec.get(name + ".weight") + self.spec.get(name + ".bias")

    def head(self, x: np.ndarray) -> np.ndarray:
        return x @ self.spec.get("wte" if self.spec.tied_head else "head").T


def split_heads(spec: LMSpec, qkv: np.ndarray) -> tuple[np.ndarray, ...]:
    """``q [B, heads, n, dh]``, ``k`` and ``v [B, kv_heads, n, dh]`` of ``q | k | v``."""
    d, dh, kv = spec.d_model, spec.d_head, spec.n_kv
    b, n = qkv.shape[:2]
    parts = (qkv[..., :d], qkv[..., d:d + kv * dh], qkv[..., d + kv * dh:])
    return tuple(z.reshape(b, n, -1, dh).transpose(0, 2, 1, 3) for z in parts)


def rotary_tables(spec: LMSpec, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos(p omega_j)`` and ``sin(p omega_j)`` ``[n, rotary_dims / 2]`` in float64 (the
    float nearest, or nearly, the exact values the certified function uses)."""
    angle = np.arange(n, dtype=np.float64)[:, None] * spec.get(INV_FREQ)[None, :]
    return np.cos(angle), np.sin(angle)


def rotate(q: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Rotary positions on the first ``2 c.shape[-1]`` dims of ``q [..., n, dh]``
    (``rotate_half``: dim ``j`` pairs with ``j + r/2``)."""
    half = c.shape[-1]
    a, b = q[..., :half], q[..., half:2 * half]
    return np.concatenate([a * c - b * s, b * c + a * s, q[..., 2 * half:]], axis=-1)


def logits64(spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """Logits ``[N, n, vocab]`` of the sequences ``tokens`` ``[N, n]`` in float64."""
    ops = Float64Ops(spec)
    return forward(ops, ops.embed(np.asarray(tokens)))


def label_margin(z: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``[..., n]``: the label's logit minus the best other logit (``z [..., n, vocab]``,
    labels ``ys [..., n]``; > 0 where the label is the unique argmax, NaN never)."""
    lab = np.take_along_axis(z, ys[..., None], -1)[..., 0]
    others = z.copy()
    np.put_along_axis(others, ys[..., None], -np.inf, -1)
    return lab - others.max(-1)
