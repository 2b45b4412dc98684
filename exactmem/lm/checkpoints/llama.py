"""LLaMA-style checkpoints (``LlamaForCausalLM``; ``Qwen2ForCausalLM`` and
``MistralForCausalLM``, which differ from it only in options) as an
:class:`~exactmem.lm.decoder.LMSpec`, and their own float64 forward pass for the
cross-check.

What is read (docs/trained-models.md, "GPT-NeoX and LLaMA"): ``embed_tokens`` (no position
embedding), per layer ``input_layernorm`` / ``post_attention_layernorm`` (RMSNorm,
``rms_norm_eps``), ``self_attn.q_proj`` / ``k_proj`` / ``v_proj`` (grouped-query with
``num_key_value_heads``; biases where stored, e.g. Qwen2's) concatenated into the spec's ``q
| k | v``, ``o_proj``, the SwiGLU MLP ``down(silu(gate(x)) * up(x))`` (``hidden_act``
``silu``; ``mlp_bias`` biases where stored), ``norm``, ``lm_head`` (or tied with
``tie_word_embeddings``); rotary positions on every head dimension with ``rope_theta``.  A
sliding window (Mistral's ``sliding_window``, Qwen2's ``use_sliding_window`` /
``layer_types``) caps the context at the window, within which attention is plain causal.
Refused by name: rope scaling variants, a partial rotary factor, another ``hidden_act``, a
``head_dim`` other than ``hidden_size / num_attention_heads``, tensors of no part of the
function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.checkpoints import hf_files as hf
from exactmem.lm.decoder import INV_FREQ, LMSpec

CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "mistral": "MistralForCausalLM"}
TOP = {"model.embed_tokens.weight": "wte", "model.norm.weight": "lnf.weight",
       "lm_head.weight": "head"}
QKV = ("q_proj", "k_proj", "v_proj")  # read apart, then concatenated into the spec's q | k | v
BLOCK = {"input_layernorm": "ln1", "post_attention_layernorm": "ln2", "self_attn.o_proj":
         "attn.proj", "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.fc",
         "mlp.down_proj": "mlp.proj", **{f"self_attn.{q}": q for q in QKV}}
IGNORED = ("rotary_emb.inv_freq",)  # a buffer of old checkpoints, recomputed by the model


def config(path: str | Path) -> dict[str, Any]:
    cfg = hf.read_config(path, tuple(CLASSES))
    if cfg.get("hidden_act", "silu") != "silu":
        raise SpecError(f"config.json: hidden_act {cfg['hidden_act']!r} is not read (read: "
                        "silu, the SwiGLU MLP)")
    hf.refuse_rope_scaling(cfg)
    if hf.rope_value(cfg, "partial_rotary_factor", "partial_rotary_factor", 1.0) != 1.0:
        raise SpecError("config.json: partial_rotary_factor is not read for LLaMA-style "
                        "models (read: rotary positions on every head dimension)")
    d, heads, _ = hf.attention_shape(cfg)
    if cfg.get("head_dim") not in (None, d // heads):
        raise SpecError(f"config.json: head_dim {cfg['head_dim']} is not read (read: "
                        f"hidden_size / num_attention_heads = {d // heads})")
    return cfg


def context(cfg: dict[str, Any]) -> int:
    """``max_position_embeddings``, capped by a sliding window where one applies."""
    n = int(cfg["max_position_embeddings"])
    sliding = cfg.get("model_type") == "mistral" or cfg.get("use_sliding_window") or \
        "sliding_attention" in (cfg.get("layer_types") or ())
    window = cfg.get("sliding_window")
    return min(n, int(window)) if sliding and window else n


def load_llama(path: str | Path) -> LMSpec:
    """Read a LLaMA / Qwen2 / Mistral checkpoint (directory or weights file)."""
    cfg = config(path)
    d, heads, layers = hf.attention_shape(cfg)
    kv = int(cfg.get("num_key_value_heads") or heads)
    dh = d // heads
    tied = bool(cfg.get("tie_word_embeddings", False))
    theta = hf.rope_value(cfg, "rope_theta", "rope_theta", 10000.0)
    names = {**TOP, **hf.block_names("model.layers.", layers, BLOCK)}
    tensors = {INV_FREQ: hf.inv_freq(theta, dh), **hf.linear_tensors(
        path, hf.read_tensors(path), names, IGNORED, cfg["model_type"], tied,
        "model.embed_tokens.weight")}
    widths = (d, kv * dh, kv * dh)
    for i in range(layers):
        p = f"h{i}."
        ws = [tensors.pop(f"{p}{q}.weight", None) for q in QKV]
        bs = [tensors.pop(f"{p}{q}.bias", None) for q in QKV]
        if any(w is None for w in ws):
            raise SpecError(f"{path}: layer {i} lacks one of q_proj, k_proj, v_proj")
        tensors[p + "attn.weight"] = np.concatenate(ws, axis=1)  # type: ignore[arg-type]
        if any(b is not None for b in bs):
            tensors[p + "attn.bias"] = np.concatenate(
                [np.zeros(w) if b is None else b for b, w in zip(bs, widths, strict=True)])
    return LMSpec(vocab_size=int(cfg["vocab_size"]), context=context(cfg), d_model=d,
                  heads=heads, layers=layers, d_ff=int(cfg["intermediate_size"]),
                  activation="silu", layer_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                  tied_head=tied, tensors=tensors, norm="rmsnorm", kv_heads=kv,
                  rotary_dims=dh, gated_mlp=True)


def llama_logits(path: str | Path, spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """The model class's float64 logits (its rotary frequencies checked equal to the
    spec's).  transformers' RMSNorm computes in float32 whatever the model's dtype, so these
    logits carry float32 roundings of every norm."""
    return hf.hf_logits(path, llama_class(path), tokens, spec.get(INV_FREQ))


def llama_class(path: str | Path) -> str:
    """The ``transformers`` class of the LLaMA-style checkpoint at ``path``."""
    return CLASSES[hf.read_config(path, tuple(CLASSES))["model_type"]]
