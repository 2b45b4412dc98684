"""Small random decoders with the GPT-NeoX / LLaMA options (rotary positions, grouped-query
attention, parallel residual, gated MLP, SiLU, GPT-2's score options) for the checker tests."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.decoder import INV_FREQ, LMSpec
from exactmem.lm.float64 import logits64
from exactmem.model.dataset import Dataset


def _probe(fields: dict[str, Any]) -> LMSpec:
    """An LMSpec without tensors, for its :meth:`~LMSpec.shapes` only."""
    spec = object.__new__(LMSpec)
    for f in dataclasses.fields(LMSpec):
        value = fields.get(f.name, f.default)
        object.__setattr__(spec, f.name, {} if value is dataclasses.MISSING else value)
    return spec


def arch_spec(seed: int, *, vocab: int = 11, context: int = 8, d: int = 8, heads: int = 2,
              layers: int = 2, d_ff: int = 16, activation: str = "gelu_tanh",
              tied: bool = False, biases: bool = True, scale: float = 0.5,
              **options: Any) -> LMSpec:
    """A random LMSpec with float32 weights and the options given (``kv_heads``,
    ``rotary_dims``, ``parallel_residual``, ``gated_mlp``, ``score_scale``,
    ``inverse_layer_scale``, ``norm``, ``norm_first``, ``final_norm``); ``rope.inv_freq`` is
    transformers' ``1 / 10000 ** (arange(0, r, 2) / r)`` in float32."""
    fields = dict(vocab_size=vocab, context=context, d_model=d, heads=heads, layers=layers,
                  d_ff=d_ff, activation=activation, layer_norm_eps=1e-5, tied_head=tied,
                  **options)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in _probe(fields).shapes().items():
        if name.endswith(".bias") and not biases:
            continue
        if name == INV_FREQ:
            r = options["rotary_dims"]
            t = 1.0 / 10000.0 ** (np.arange(0, r, 2, dtype=np.float32) / np.float32(r))
        elif ".ln" in "." + name and name.endswith("weight"):
            t = 1 + rng.normal(0, 0.2, shape)
        else:
            t = rng.normal(0, scale, shape)
        tensors[name] = np.asarray(t, dtype=np.float32).astype(np.float64)
    return LMSpec(tensors=tensors, **fields)


def self_labelled(spec: LMSpec, seqs: int, seed: int = 0) -> Dataset:
    """``seqs`` random sequences of the full context labelled with the float64 argmax."""
    toks = np.random.default_rng(seed).integers(0, spec.vocab_size, (seqs, spec.context))
    ys = logits64(spec, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                   sequences=tuple(map(tuple, toks.tolist())),
                   labels=tuple(map(tuple, ys.tolist())))


def certificate(spec: LMSpec, ds: Dataset) -> dict[str, Any]:
    """A certificate claiming every position (partial), for the checker to judge."""
    return build_lm_certificate(spec, ds, [list(range(ds.n))] * ds.N, True)
