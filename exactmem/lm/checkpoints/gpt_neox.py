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
from exactmem.lm.checkpoints.hf_files import (
    inv_freq,
    read_config,
    read_tensors,
    refuse_rope_scaling,
    rope_value,
)
from exactmem.lm.decoder import INV_FREQ, LMSpec

ACTIVATIONS = {"gelu": "gelu_erf", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
BLOCK = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2",
         "attention.query_key_value": "attn", "attention.dense": "attn.proj",
         "mlp.dense_h_to_4h": "mlp.fc", "mlp.dense_4h_to_h": "mlp.proj"}
IGNORED = ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq",
           "rotary_emb.inv_freq")  # buffers of old checkpoints, recomputed by the model


def config(path: str | Path) -> dict[str, Any]:
    cfg = read_config(path, ("gpt_neox",))
    act = cfg.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise SpecError(f"config.json: hidden_act {act!r} is not read (read: "
                        f"{', '.join(ACTIVATIONS)})")
    refuse_rope_scaling(cfg)
    if cfg.get("add_cross_attention"):
        raise SpecError("config.json: add_cross_attention is not read")
    return cfg


def qkv_order(heads: int, dh: int) -> np.ndarray:
    """Column ``c`` of the spec's ``q | k | v`` is column ``order[c]`` of GPT-NeoX's
    per-head ``q_h | k_h | v_h``."""
    j, h, t = np.meshgrid(np.arange(3), np.arange(heads), np.arange(dh), indexing="ij")
    return (h * 3 * dh + j * dh + t).ravel()


def load_gpt_neox(path: str | Path) -> LMSpec:
    """Read a GPT-NeoX checkpoint (directory or weights file; module docstring)."""
    cfg = config(path)
    raw = read_tensors(path)
    d, heads, layers = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), \
        int(cfg["num_hidden_layers"])
    if heads < 1 or d % heads:
        raise SpecError(f"config.json: num_attention_heads {heads} does not divide "
                        f"hidden_size {d}")
    dh = d // heads
    pct = rope_value(cfg, "partial_rotary_factor", "rotary_pct", 0.25)
    rot = int(dh * pct)
    if rot < 2 or rot % 2:
        raise SpecError(f"config.json: partial_rotary_factor {pct} gives {rot} rotary dims "
                        f"of {dh}: expected an even number >= 2")
    theta = rope_value(cfg, "rope_theta", "rotary_emb_base", 10000.0)
    tied = bool(cfg.get("tie_word_embeddings", False))
    order = qkv_order(heads, dh)
    tensors: dict[str, np.ndarray] = {INV_FREQ: inv_freq(theta, rot)}
    names = {"gpt_neox.embed_in.weight": "wte", "gpt_neox.final_layer_norm.weight":
             "lnf.weight", "gpt_neox.final_layer_norm.bias": "lnf.bias",
             "embed_out.weight": "head", "lm_head.weight": "head"}  # transformers 5's name
    for i in range(layers):
        for theirs, ours in BLOCK.items():
            for kind in ("weight", "bias"):
                names[f"gpt_neox.layers.{i}.{theirs}.{kind}"] = f"h{i}.{ours}.{kind}"
    for key, value in raw.items():
        if key.endswith(IGNORED):
            continue
        if key not in names:
            raise SpecError(f"{path}: tensor {key} is not part of a GPT-NeoX causal LM "
                            "(unsupported layer)")
        ours = names[key]
        if ours == "head" and "embed_out.weight" in raw and "lm_head.weight" in raw:
            raise SpecError(f"{path}: both embed_out.weight and lm_head.weight (one head)")
        if ours == "head" and tied:
            if not np.array_equal(value, raw.get("gpt_neox.embed_in.weight", value)):
                raise SpecError("embed_out.weight differs from embed_in.weight although "
                                "tie_word_embeddings is true")
            continue
        if ours.endswith(".weight") and value.ndim == 2 and ours != "wte" and ours != "head":
            value = value.T  # nn.Linear stores [out, in]
        if ours.endswith(("attn.weight", "attn.bias")):
            if value.shape[-1] != 3 * d:
                raise SpecError(f"{key}: shape {list(value.shape)}, expected {3 * d} outputs")
            value = value[..., order]
        tensors[ours] = np.ascontiguousarray(value)
    return LMSpec(vocab_size=int(cfg["vocab_size"]), context=int(cfg["max_position_embeddings"]),
                  d_model=d, heads=heads, layers=layers, d_ff=int(cfg["intermediate_size"]),
                  activation=ACTIVATIONS[cfg.get("hidden_act", "gelu")],  # type: ignore[arg-type]
                  layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-5)), tied_head=tied,
                  tensors=tensors, rotary_dims=rot,
                  parallel_residual=bool(cfg.get("use_parallel_residual", True)))


def gpt_neox_logits(path: str | Path, spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """``transformers.GPTNeoXForCausalLM``'s float64 logits (its rotary frequencies checked
    equal to the spec's)."""
    from exactmem.lm.checkpoints.hf_files import hf_logits

    return hf_logits(path, "GPTNeoXForCausalLM", tokens, spec.get(INV_FREQ))
