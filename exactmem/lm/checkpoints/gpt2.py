"""Hugging Face GPT-2 checkpoints (``GPT2LMHeadModel.save_pretrained``: ``config.json`` +
``model.safetensors``) as an :class:`~exactmem.lm.decoder.LMSpec`, and their own torch
forward pass for the cross-check.

GPT-2's ``Conv1D`` stores weights ``[in, out]`` (``y = x W + b``), the layout of the spec;
``c_attn`` packs q | k | v along the output.  The activation ``gelu_new`` and
``gelu_pytorch_tanh`` are the tanh form, ``gelu`` the erf form.  Options that change the
function beyond this (``scale_attn_by_inverse_layer_idx``, no score scale, cross attention)
are refused by name.  Reading the weights needs ``safetensors`` and ``torch``; the
cross-check needs ``transformers`` (``pip install 'exactmem[trained]'``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import MissingDependencyError, SpecError
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
    names = {prefix + theirs: ours for theirs, ours in TOP.items()}
    for i in range(layers):
        for theirs, ours in BLOCK.items():
            for kind in ("weight", "bias"):
                names[f"{prefix}h.{i}.{theirs}.{kind}"] = f"h{i}.{ours}.{kind}"
    return names


def is_gpt2_dir(path: Path) -> bool:
    cfg = path / "config.json"
    if not path.is_dir() or not cfg.is_file():
        return False
    try:
        return json.loads(cfg.read_text(encoding="utf-8")).get("model_type") == "gpt2"
    except (OSError, ValueError, AttributeError):
        return False


def _config(path: Path) -> dict[str, Any]:
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError(f"{path}/config.json: cannot read it: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("model_type") != "gpt2":
        raise SpecError(f"{path}/config.json: expected model_type 'gpt2', found "
                        f"{cfg.get('model_type') if isinstance(cfg, dict) else cfg!r}")
    act = cfg.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise SpecError(f"config.json: activation_function {act!r} is not supported "
                        f"(supported: {sorted(ACTIVATIONS)})")
    for key, ok in (("scale_attn_by_inverse_layer_idx", False), ("scale_attn_weights", True),
                    ("add_cross_attention", False)):
        if cfg.get(key, ok) != ok:
            raise SpecError(f"config.json: {key} = {cfg[key]!r} is not supported")
    return cfg


def _tensors(path: Path) -> dict[str, np.ndarray]:
    file = path / "model.safetensors"
    if not file.is_file():
        raise SpecError(f"{path}: no model.safetensors (save with safe_serialization=True)")
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise MissingDependencyError("reading a GPT-2 checkpoint needs safetensors and torch: "
                                     "pip install 'exactmem[trained]'") from exc
    try:
        raw = load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message
        raise SpecError(f"{file}: cannot read it: {exc}") from None
    out = {}
    for k, v in raw.items():
        if not v.is_floating_point():
            raise SpecError(f"{file}: tensor {k} has dtype {v.dtype}, expected a float type")
        out[k] = v.double().numpy()  # every float32/16/bf16 is exactly a float64
    return out


def load_gpt2(path: str | Path) -> LMSpec:
    """Read a GPT-2 checkpoint directory; shapes checked against the config, NaN and
    infinite weights refused (:class:`SpecError`, naming the tensor)."""
    path = Path(path)
    cfg = _config(path)
    raw = _tensors(path)
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
            raise SpecError(f"model.safetensors: tensor {key} is not part of a GPT-2 LM "
                            "(unsupported layer)")
    return LMSpec(vocab_size=int(cfg["vocab_size"]), context=int(cfg["n_positions"]),
                  d_model=d, heads=int(cfg["n_head"]), layers=int(cfg["n_layer"]),
                  d_ff=int(cfg.get("n_inner") or 4 * d),
                  activation=ACTIVATIONS[cfg.get("activation_function", "gelu_new")],  # type: ignore[arg-type]
                  layer_norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)), tied_head=tied,
                  tensors=tensors)


def torch_logits(path: str | Path, tokens: np.ndarray, dtype: str = "float64") -> np.ndarray:
    """The checkpoint's own forward pass (``transformers.GPT2LMHeadModel``, eval mode) in
    ``dtype``: logits ``[N, n, vocab]`` as float64."""
    try:
        import torch
        from transformers import GPT2LMHeadModel
    except ImportError as exc:
        raise MissingDependencyError("the GPT-2 cross-check needs transformers and torch: "
                                     "pip install 'exactmem[trained]'") from exc
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    model = GPT2LMHeadModel.from_pretrained(str(path), dtype=getattr(torch, dtype))
    model.eval()
    out = []
    with torch.no_grad():
        for b in range(0, len(tokens), 256):
            ids = torch.as_tensor(np.asarray(tokens[b:b + 256]), dtype=torch.long)
            out.append(model(ids).logits.double().numpy())
    return np.concatenate(out)
