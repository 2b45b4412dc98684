"""Small random GPT-2 checkpoints and self-labelled token datasets, for demos, tests and
benchmarks (needs ``transformers``: ``pip install 'exactmem[trained]'``).

:func:`random_gpt2` draws every parameter from a fixed seed (weights ``N(0, std)``, biases
``N(0, bias_std)``, LayerNorm gains ``1 + N(0, bias_std)``), so biases and gains take part in
the function, and saves it with ``save_pretrained``.  :func:`self_labelled` labels random
sequences with the checkpoint's own float64 argmax at every position.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exactmem.errors import MissingDependencyError
from exactmem.model.dataset import Dataset


def random_gpt2(path: str | Path, seed: int = 0, layers: int = 2, d_model: int = 32,
                heads: int = 2, vocab: int = 64, context: int = 16, std: float = 0.3,
                bias_std: float = 0.1) -> Path:
    """Write a random ``GPT2LMHeadModel`` to the directory ``path``; returns it."""
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as exc:
        raise MissingDependencyError("random_gpt2 needs transformers and torch: "
                                     "pip install 'exactmem[trained]'") from exc
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    gen = torch.Generator().manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=context, n_embd=d_model, n_layer=layers,
                     n_head=heads, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("bias"):
                p.copy_(bias_std * noise)
            elif ".ln_" in name:
                p.copy_(1 + bias_std * noise)
            else:
                p.copy_(std * noise)
    path = Path(path)
    model.save_pretrained(str(path))
    return path


def self_labelled(path: str | Path, count: int, length: int, seed: int = 0) -> Dataset:
    """``count`` random sequences of ``length`` tokens, labelled at every position with the
    checkpoint's own float64 argmax (a seq2seq token-id dataset)."""
    import json

    from exactmem.adapters.gpt2 import torch_logits

    vocab = int(json.loads((Path(path) / "config.json").read_text())["vocab_size"])
    toks = np.random.default_rng(seed).integers(0, vocab, size=(count, length))
    labels = torch_logits(path, toks, "float64").argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids",
                   sequences=tuple(tuple(int(t) for t in s) for s in toks),
                   labels=tuple(tuple(int(y) for y in r) for r in labels), vocab_size=vocab)
