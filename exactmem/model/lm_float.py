"""The float64 forward pass of an :class:`~exactmem.model.lm_spec.LMSpec` (numpy).

Not a proof of anything: it labels a dataset with the model's own argmax, and it is the
spec's side of the cross-check against the checkpoint's own torch forward pass (an importer
that maps a tensor wrongly shows up as disagreeing logits).
"""

from __future__ import annotations

import math

import numpy as np

from exactmem.model.lm_spec import LMSpec


def _ln(spec: LMSpec, x: np.ndarray, name: str) -> np.ndarray:
    if spec.norm == "rmsnorm":
        ms = (x * x).mean(-1, keepdims=True)
        return x / np.sqrt(ms + spec.layer_norm_eps) * spec.get(name + ".weight") \
            + spec.get(name + ".bias")
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + spec.layer_norm_eps) * spec.get(name + ".weight") \
        + spec.get(name + ".bias")


def _gelu(spec: LMSpec, x: np.ndarray) -> np.ndarray:
    if spec.activation == "relu":
        return np.maximum(x, 0.0)
    if spec.activation == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def logits64(spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """Logits ``[N, n, vocab]`` of the sequences ``tokens`` ``[N, n]`` in float64."""
    tokens = np.asarray(tokens)
    n = tokens.shape[1]
    d, h, dh = spec.d_model, spec.heads, spec.d_head
    x = spec.get("wte")[tokens] + spec.get("wpe")[:n][None]
    mask = np.triu(np.ones((n, n), dtype=bool), 1)
    for i in range(spec.layers):
        p = f"h{i}."
        a_in = _ln(spec, x, p + "ln1") if spec.norm_first else x
        qkv = a_in @ spec.get(p + "attn.weight") + spec.get(p + "attn.bias")
        q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(*x.shape[:2], h, dh).transpose(0, 2, 1, 3)
                   for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        s[..., mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + o @ spec.get(p + "attn.proj.weight") + spec.get(p + "attn.proj.bias")
        if not spec.norm_first:
            x = _ln(spec, x, p + "ln1")
        f_in = _ln(spec, x, p + "ln2") if spec.norm_first else x
        m = _gelu(spec, f_in @ spec.get(p + "mlp.fc.weight") + spec.get(p + "mlp.fc.bias"))
        x = x + m @ spec.get(p + "mlp.proj.weight") + spec.get(p + "mlp.proj.bias")
        if not spec.norm_first:
            x = _ln(spec, x, p + "ln2")
    head = spec.get("wte" if spec.tied_head else "head")
    return (_ln(spec, x, "lnf") if spec.final_norm else x) @ head.T


def label_margin(z: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``[..., n]``: the label's logit minus the best other logit (``z [..., n, vocab]``,
    labels ``ys [..., n]``; > 0 where the label is the unique argmax, NaN never)."""
    lab = np.take_along_axis(z, ys[..., None], -1)[..., 0]
    others = z.copy()
    np.put_along_axis(others, ys[..., None], -np.inf, -1)
    return lab - others.max(-1)
