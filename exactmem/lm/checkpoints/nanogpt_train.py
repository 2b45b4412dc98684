"""Train a small nanoGPT-style model on token sequences and save it as a nanoGPT checkpoint
(``{"model": state_dict, "model_args": ...}``, the layout
:func:`~exactmem.lm.checkpoints.nanogpt.load_nanogpt` reads), for experiments and tests of
memorization (scripts/acceptance_extract.py).

The model is nanoGPT's ``GPT`` (pre-LN blocks, causal attention, ``nn.GELU()`` erf form, MLP
width ``4 d``, LM head tied to ``wte``, no dropout), restated on a dict of tensors as
:func:`~exactmem.lm.checkpoints.nanogpt.nanogpt_logits` does; initialised as nanoGPT does
(normal, std 0.02; LayerNorm weights 1, biases 0); trained in float32 with AdamW on the
cross-entropy of every next token, one torch thread, so a seed gives the same model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

EPS = 1e-5


def _forward(sd: dict[str, Any], idx: Any, layers: int, d: int, heads: int) -> Any:
    """Logits ``[B, n, V]`` of nanoGPT's forward pass on the tensors ``sd``."""
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    def ln(x: Any, name: str) -> Any:
        return F.layer_norm(x, (d,), sd[name + ".weight"], sd.get(name + ".bias"), EPS)

    def lin(x: Any, name: str) -> Any:
        return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))

    b, n = idx.shape
    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:n]
    for i in range(layers):
        p = f"transformer.h.{i}."
        q, k, v = lin(ln(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=2)
        q, k, v = (t.view(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + lin(y.transpose(1, 2).reshape(b, n, d), p + "attn.c_proj")
        x = x + lin(F.gelu(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ sd["transformer.wte.weight"].T


def train_nanogpt(path: str | Path, tokens: np.ndarray, vocab: int, *, layers: int = 2,
                  d_model: int = 32, heads: int = 2, context: int | None = None,
                  steps: int = 1000, lr: float = 3e-3, batch: int = 32, seed: int = 0,
                  log: Any = None) -> float:
    """Train on the rows of ``tokens`` (``[N, L]`` ids; a row repeated is seen that many
    times more often) for ``steps`` AdamW steps of ``batch`` rows drawn without
    replacement per pass; save to ``path``; returns the last loss (nats per token)."""
    from exactmem.optional import require

    torch = require("torch", "training", "trained")
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    d, ctx = d_model, context or tokens.shape[1] - 1
    shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (vocab, d),
                                          "transformer.wpe.weight": (ctx, d),
                                          "transformer.ln_f.weight": (d,),
                                          "transformer.ln_f.bias": (d,)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,),
                       p + "attn.c_attn.weight": (3 * d, d), p + "attn.c_attn.bias": (3 * d,),
                       p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                       p + "ln_2.weight": (d,), p + "ln_2.bias": (d,),
                       p + "mlp.c_fc.weight": (4 * d, d), p + "mlp.c_fc.bias": (4 * d,),
                       p + "mlp.c_proj.weight": (d, 4 * d), p + "mlp.c_proj.bias": (d,)})
    sd: dict[str, Any] = {}
    for name, shape in shapes.items():
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif ".ln_" in name:
            t = torch.ones(shape)
        else:
            t = torch.randn(shape, generator=gen) * 0.02
        sd[name] = t.requires_grad_(True)
    opt = torch.optim.AdamW(list(sd.values()), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    step, loss = 0, float("nan")
    while step < steps:
        for idx in torch.randperm(len(x), generator=gen).split(batch):
            rows = x[idx]
            logits = _forward(sd, rows[:, :-1], layers, d, heads)
            out = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                    rows[:, 1:].reshape(-1))
            opt.zero_grad()
            out.backward()
            opt.step()
            step += 1
            loss = float(out.detach())
            if log is not None and step % 200 == 0:
                log(f"train step {step}/{steps}: loss {loss:.4f} nats/token")
            if step >= steps:
                break
    state = {k: v.detach().clone() for k, v in sd.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    args = {"n_layer": layers, "n_head": heads, "n_embd": d, "block_size": ctx, "bias": True,
            "vocab_size": vocab, "dropout": 0.0}
    torch.save({"model": state, "model_args": args, "iter_num": steps}, str(path))
    return loss
