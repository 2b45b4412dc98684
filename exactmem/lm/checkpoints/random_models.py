"""Small random GPT-2 and nanoGPT checkpoints and self-labelled token datasets, for demos,
tests and benchmarks (needs ``transformers`` and torch: ``pip install 'exactmem[trained]'``).

:func:`random_gpt2` draws every parameter from a fixed seed (weights ``N(0, std)``, biases
``N(0, bias_std)``, LayerNorm gains ``1 + N(0, bias_std)``), so biases and gains take part in
the function, and saves it with ``save_pretrained``.  :func:`self_labelled` labels random
sequences with the checkpoint's own float64 argmax at every position.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.model.dataset import Dataset
from exactmem.optional import require


def random_value(name: str, shape: tuple[int, ...], gen: Any, std: float, bias_std: float,
                 norm: str) -> Any:
    """One parameter from ``gen``: ``N(0, bias_std)`` for a bias, ``1 + N(0, bias_std)`` for a
    norm gain (``norm`` in its name), ``N(0, std)`` otherwise."""
    import torch

    noise = torch.randn(shape, generator=gen)
    if name.endswith("bias"):
        return bias_std * noise
    if norm in name:
        return 1 + bias_std * noise
    return std * noise


def randomize(model: Any, gen: Any, std: float, bias_std: float, norm: str) -> None:
    """Every parameter of the torch ``model`` by :func:`random_value`, in order."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(random_value(name, tuple(p.shape), gen, std, bias_std, norm))


def random_gpt2(path: str | Path, seed: int = 0, layers: int = 2, d_model: int = 32,
                heads: int = 2, vocab: int = 64, context: int = 16, std: float = 0.3,
                bias_std: float = 0.1) -> Path:
    """Write a random ``GPT2LMHeadModel`` to the directory ``path``; returns it."""
    torch = require("torch", "random_gpt2", extra="trained")
    transformers = require("transformers", "random_gpt2")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    gen = torch.Generator().manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=context, n_embd=d_model,
                                  n_layer=layers, n_head=heads, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    randomize(model, gen, std, bias_std, ".ln_")
    path = Path(path)
    model.save_pretrained(str(path))
    return path


def random_nanogpt(path: str | Path, seed: int = 0, layers: int = 2, d_model: int = 32,
                   heads: int = 2, vocab: int = 64, context: int = 16, bias: bool = True,
                   std: float = 0.3, bias_std: float = 0.1) -> Path:
    """Write a random nanoGPT checkpoint (``{"model": state_dict, "model_args": ...}``, the
    key names and ``nn.Linear`` layouts of nanoGPT's ``GPT``, lm_head tied) to ``path``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    d = d_model
    shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (vocab, d),
                                          "transformer.wpe.weight": (context, d),
                                          "transformer.ln_f.weight": (d,)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "attn.c_attn.weight": (3 * d, d),
                       p + "attn.c_proj.weight": (d, d), p + "ln_2.weight": (d,),
                       p + "mlp.c_fc.weight": (4 * d, d), p + "mlp.c_proj.weight": (d, 4 * d)})
    if bias:
        shapes.update({k[:-len("weight")] + "bias": (v[0],) for k, v in list(shapes.items())
                       if not k.startswith(("transformer.wte", "transformer.wpe"))})
    sd = {}
    for name, shape in shapes.items():
        sd[name] = random_value(name, shape, gen, std, bias_std, ".ln_")
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    args = {"n_layer": layers, "n_head": heads, "n_embd": d, "block_size": context,
            "bias": bias, "vocab_size": vocab, "dropout": 0.0}
    path = Path(path)
    torch.save({"model": sd, "model_args": args, "iter_num": 0}, str(path))
    return path


def self_labelled(path: str | Path, count: int, length: int, seed: int = 0) -> Dataset:
    """``count`` random sequences of ``length`` tokens, labelled at every position with the
    checkpoint's own float64 argmax (a seq2seq token-id dataset); ``path`` a GPT-2 directory
    or a nanoGPT checkpoint file."""
    import json

    if Path(path).is_dir():
        from exactmem.lm.checkpoints.gpt2 import torch_logits

        vocab = int(json.loads((Path(path) / "config.json").read_text())["vocab_size"])
        toks = np.random.default_rng(seed).integers(0, vocab, size=(count, length))
        logits = torch_logits(path, toks, "float64")
    else:
        from exactmem.lm.checkpoints.nanogpt import nanogpt_logits, read_checkpoint

        vocab = read_checkpoint(path)[0]["vocab_size"]
        toks = np.random.default_rng(seed).integers(0, vocab, size=(count, length))
        logits = nanogpt_logits(path, toks)
    labels = logits.argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids",
                   sequences=tuple(tuple(int(t) for t in s) for s in toks),
                   labels=tuple(tuple(int(y) for y in r) for r in labels), vocab_size=vocab)


def random_encoder(path: str | Path, seed: int = 0, norm_first: bool = True,
                   activation: str = "gelu", final_norm: bool = True, layers: int = 2,
                   d_model: int = 32, heads: int = 2, vocab: int = 64, context: int = 16,
                   d_ff: int = 64, std: float = 0.3, bias_std: float = 0.1,
                   norm: str = "layernorm", eps: float | None = 1e-5) -> Path:
    """Write a random reference module (every parameter from ``seed``: weights ``N(0,
    std)``, biases ``N(0, bias_std)``, norm gains ``1 + N(0, bias_std)``) to ``path``;
    ``norm`` "layernorm" or "rmsnorm" (``eps`` None: torch's default, RMSNorm only)."""
    import torch

    from exactmem.lm.checkpoints.torch_encoder import reference_module
    cfg = {"vocab_size": vocab, "context": context, "d_model": d_model, "heads": heads,
           "layers": layers, "d_ff": d_ff, "norm_first": norm_first, "activation": activation,
           "layer_norm_eps": eps, "final_norm": final_norm, "norm": norm}
    model = reference_module(cfg)
    gen = torch.Generator().manual_seed(seed)
    randomize(model, gen, std, bias_std, "norm")
    path = Path(path)
    torch.save({"config": cfg, "state_dict": model.state_dict()}, str(path))
    return path


def self_labelled_encoder(path: str | Path, count: int, length: int, seed: int = 0) -> Dataset:
    """``count`` random sequences of ``length`` tokens labelled at every position with the
    checkpoint's own float64 argmax."""
    from exactmem.lm.checkpoints.torch_encoder import encoder_logits, read_checkpoint

    vocab = read_checkpoint(path)[0]["vocab_size"]
    toks = np.random.default_rng(seed).integers(0, vocab, size=(count, length))
    labels = encoder_logits(path, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids",
                   sequences=tuple(tuple(int(t) for t in s) for s in toks),
                   labels=tuple(tuple(int(y) for y in r) for r in labels), vocab_size=vocab)
