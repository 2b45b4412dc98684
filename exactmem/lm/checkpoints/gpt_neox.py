"""GPT-NeoX checkpoints (Pythia; ``GPTNeoXForCausalLM.save_pretrained``) as an
:class:`~exactmem.lm.decoder.LMSpec`, and their own float64 forward pass for the cross-check.

What is read (docs/trained-models.md, "GPT-NeoX and LLaMA"): ``embed_in`` (no position
embedding), per layer ``input_layernorm`` / ``post_attention_layernorm`` (LayerNorm with
bias, ``layer_norm_eps``), ``attention.query_key_value`` (stored per head as ``q_h | k_h |
v_h``; reordered into the spec's ``q | k | v``), ``attention.dense``, ``mlp.dense_h_to_4h``
/ ``dense_4h_to_h`` (``hidden_act`` ``gelu`` = the erf form, ``gelu_new`` /
``gelu_pytorch_tanh`` = the tanh form), ``final_layer_norm``, ``embed_out`` (``lm_head``
in a ``transformers`` 5 state dict; untied, or tied with ``tie_word_embeddings``);
``use_parallel_residual`` (both forms); rotary positions on
``int(d_head * partial_rotary_factor)`` dims (``rope_parameters`` or the older
``rotary_pct``, default 0.25) with ``rope_theta`` (older ``rotary_emb_base``, default 10000)
and the frequencies :func:`~exactmem.lm.checkpoints.hf_files.inv_freq`.  Refused by name:
rope scaling variants, other activations, an odd rotary width, tensors of no part of the
function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.checkpoints import hf_files as hf
from exactmem.lm.decoder import INV_FREQ, LMSpec

ACTIVATIONS = {"gelu": "gelu_erf", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
BLOCK = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2",
         "attention.query_key_value": "attn", "attention.dense": "attn.proj",
         "mlp.dense_h_to_4h": "mlp.fc", "mlp.dense_4h_to_h": "mlp.proj"}
TOP = {"gpt_neox.embed_in.weight": "wte", "gpt_neox.final_layer_norm.weight": "lnf.weight",
       "gpt_neox.final_layer_norm.bias": "lnf.bias", "embed_out.weight": "head",
       "lm_head.weight": "head"}  # lm_head: transformers 5's name of embed_out
IGNORED = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq",
           "rotary_emb.inv_freq")  # buffers of old checkpoints, recomputed by the model


def config(path: str | Path) -> dict[str, Any]:
    cfg = hf.read_config(path, ("gpt_neox",))
    act = cfg.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise SpecError(f"config.json: hidden_act {act!r} is not read (read: "
                        f"{', '.join(ACTIVATIONS)})")
    hf.refuse_rope_scaling(cfg)
    if cfg.get("add_cross_attention"):
        raise SpecError("config.json: add_cross_attention is not read")
    hf.attention_shape(cfg)
    return cfg


def qkv_order(heads: int, dh: int) -> np.ndarray:
    """Column ``c`` of the spec's ``q | k | v`` is column ``order[c]`` of GPT-NeoX's
    per-head ``q_h | k_h | v_h``."""
    j, h, t = np.meshgrid(np.arange(3), np.arange(heads), np.arange(dh), indexing="ij")
    return (h * 3 * dh + j * dh + t).ravel()


def load_gpt_neox(path: str | Path) -> LMSpec:
    """Read a GPT-NeoX checkpoint (directory or weights file; module docstring)."""
    cfg = config(path)
    d, heads, layers = hf.attention_shape(cfg)
    dh = d // heads
    pct = hf.rope_value(cfg, "partial_rotary_factor", "rotary_pct", 0.25)
    rot = int(dh * pct)
    if rot < 2 or rot % 2:
        raise SpecError(f"config.json: partial_rotary_factor {pct} gives {rot} rotary dims "
                        f"of {dh}: expected an even number >= 2")
    theta = hf.rope_value(cfg, "rope_theta", "rotary_emb_base", 10000.0)
    tied = bool(cfg.get("tie_word_embeddings", False))
    names = {**TOP, **hf.block_names("gpt_neox.layers.", layers, BLOCK)}
    tensors = {INV_FREQ: hf.inv_freq(theta, rot), **hf.linear_tensors(
        path, hf.read_tensors(path), names, IGNORED, "GPT-NeoX", tied, "gpt_neox.embed_in.weight")}
    order = qkv_order(heads, dh)
    for name, value in tensors.items():
        if name.endswith(("attn.weight", "attn.bias")):  # per head q_h | k_h | v_h
            if value.shape[-1] != 3 * d:
                raise SpecError(f"{path}: {name}: shape {list(value.shape)}, expected {3 * d} "
                                "outputs")
            tensors[name] = np.ascontiguousarray(value[..., order])
    return LMSpec(vocab_size=int(cfg["vocab_size"]), context=int(cfg["max_position_embeddings"]),
                  d_model=d, heads=heads, layers=layers, d_ff=int(cfg["intermediate_size"]),
                  activation=ACTIVATIONS[cfg.get("hidden_act", "gelu")],  # type: ignore[arg-type]
                  layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-5)), tied_head=tied,
                  tensors=tensors, rotary_dims=rot,
                  parallel_residual=bool(cfg.get("use_parallel_residual", True)))


def gpt_neox_logits(path: str | Path, spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """``transformers.GPTNeoXForCausalLM``'s float64 logits (its rotary frequencies checked
    equal to the spec's)."""
    return hf.hf_logits(path, "GPTNeoXForCausalLM", tokens, spec.get(INV_FREQ))
