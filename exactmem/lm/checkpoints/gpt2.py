"""Hugging Face GPT-2 checkpoints (``GPT2LMHeadModel.save_pretrained``: ``config.json`` +
``model.safetensors``) as an :class:`~exactmem.lm.decoder.LMSpec`, and their own torch
forward pass for the cross-check.

GPT-2's ``Conv1D`` stores weights ``[in, out]`` (``y = x W + b``), the layout of the spec;
``c_attn`` packs q | k | v along the output.  The activation ``gelu_new`` and
``gelu_pytorch_tanh`` are the tanh form, ``gelu`` the erf form.  ``scale_attn_weights``
false (scores ``q.k`` without ``1/sqrt(d_head)``) and ``scale_attn_by_inverse_layer_idx``
(block ``i``'s scores also divided by ``i + 1``) are read (not yet in certificates); cross
attention is refused by name.  The weights are read in every layout ``save_pretrained``
writes (:mod:`.hf_files`).  Reading them needs ``safetensors`` and ``torch``; the
cross-check needs ``transformers`` (``pip install 'exactmem[trained]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.checkpoints.hf_files import block_names, hf_logits, read_config, read_tensors
from exactmem.lm.decoder import LMSpec

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu_erf"}
#: GPT-2's tensor names (Hugging Face's ``GPT2Model`` and nanoGPT's ``GPT`` spell them alike,
#: nanoGPT under ``transformer.``) and the spec's: outside the blocks, then per block
#: ``h.{i}.<theirs>.{weight,bias}`` -> ``h{i}.<ours>.{weight,bias}``.
TOP = {"wte.weight": "wte", "wpe.weight": "wpe", "ln_f.weight": "lnf.weight",
       "ln_f.bias": "lnf.bias"}
BLOCK = {"ln_1": "ln1", "attn.c_attn": "attn", "attn.c_proj": "attn.proj", "ln_2": "ln2",
         "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
IGNORED = ("attn.bias", "attn.masked_bias")  # causal-mask buffers of old checkpoints


def tensor_names(layers: int, prefix: str = "") -> dict[str, str]:
    """GPT-2's tensor name (under ``prefix``) -> the spec's, for ``layers`` blocks."""
    return {**{prefix + theirs: ours for theirs, ours in TOP.items()},
            **block_names(f"{prefix}h.", layers, BLOCK)}


def _config(path: Path) -> dict[str, Any]:
    cfg = read_config(path, ("gpt2",))
    act = cfg.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise SpecError(f"config.json: activation_function {act!r} is not supported "
                        f"(supported: {sorted(ACTIVATIONS)})")
    if cfg.get("add_cross_attention", False):
        raise SpecError(f"config.json: add_cross_attention = {cfg['add_cross_attention']!r} is "
                        "not supported (read: a decoder-only GPT-2 LM)")
    for key in ("scale_attn_by_inverse_layer_idx", "scale_attn_weights"):
        if not isinstance(cfg.get(key, False), bool):
            raise SpecError(f"config.json: {key}: expected a bool, found {cfg[key]!r}")
    return cfg


def load_gpt2(path: str | Path) -> LMSpec:
    """Read a GPT-2 checkpoint directory; shapes checked against the config, NaN and
    infinite weights refused (:class:`SpecError`, naming the tensor)."""
    path = Path(path)
    cfg = _config(path)
    raw = read_tensors(path)
    d = int(cfg["n_embd"])
    tied = bool(cfg.get("tie_word_embeddings", True))
    names = tensor_names(int(cfg["n_layer"]))
    tensors: dict[str, np.ndarray] = {}
    for key, value in raw.items():
        short = key.removeprefix("transformer.")
        if short.endswith(IGNORED) and short not in names:
            continue
        if key == "lm_head.weight":
            if tied:
                if not np.array_equal(value, raw.get("transformer.wte.weight", value)):
                    raise SpecError("lm_head.weight differs from wte.weight although "
                                    "tie_word_embeddings is true")
                continue
            tensors["head"] = value
        elif short in names:
            tensors[names[short]] = value
        else:
            raise SpecError(f"{path}: tensor {key} is not part of a GPT-2 LM "
                            "(unsupported layer)")
    return LMSpec(vocab_size=int(cfg["vocab_size"]), context=int(cfg["n_positions"]),
                  d_model=d, heads=int(cfg["n_head"]), layers=int(cfg["n_layer"]),
                  d_ff=int(cfg.get("n_inner") or 4 * d),
                  activation=ACTIVATIONS[cfg.get("activation_function", "gelu_new")],  # type: ignore[arg-type]
                  layer_norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)), tied_head=tied,
                  tensors=tensors, score_scale=bool(cfg.get("scale_attn_weights", True)),
                  inverse_layer_scale=bool(cfg.get("scale_attn_by_inverse_layer_idx", False)))


def torch_logits(path: str | Path, tokens: np.ndarray, dtype: str = "float64") -> np.ndarray:
    """The checkpoint's own forward pass (``transformers.GPT2LMHeadModel``, eval mode, eager
    attention) in ``dtype``: logits ``[N, n, vocab]`` as float64 (:func:`.hf_logits`)."""
    return hf_logits(path, "GPT2LMHeadModel", tokens, dtype=dtype, attention="eager")
