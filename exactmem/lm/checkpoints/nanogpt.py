"""nanoGPT-style checkpoints (``torch.save({"model": state_dict, "model_args": {...}})``, as
Karpathy's nanoGPT ``train.py`` writes them) as an :class:`~exactmem.lm.decoder.LMSpec`.

nanoGPT's ``GPT``: GPT-2's tensor names (:func:`~exactmem.lm.checkpoints.gpt2.tensor_names`)
under ``transformer.``, ``nn.Linear`` weights ``[out, in]`` (transposed here to the spec's
``[in, out]``), ``c_attn`` packing q | k | v, ``nn.GELU()`` (the erf form), LayerNorm with
``eps = 1e-5`` and an optional bias (``model_args["bias"]``), the MLP width ``4 d``, the LM head
tied to ``wte``.  A ``_orig_mod.`` prefix (``torch.compile``) is dropped; the causal-mask buffer
``attn.bias`` is ignored.  :func:`nanogpt_logits` is nanoGPT's forward pass restated with torch's
own modules (``F.layer_norm``, ``F.scaled_dot_product_attention(is_causal=True)``, ``F.gelu``)
on the raw state dict, for the cross-check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.checkpoints.gpt2 import tensor_names
from exactmem.lm.decoder import LMSpec
from exactmem.optional import reads_as, require

EPS = 1e-5  # nanoGPT's LayerNorm: F.layer_norm(x, ..., 1e-5)
ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model_args, state dict of tensors)`` of a nanoGPT checkpoint file."""
    torch = require("torch", "reading a nanoGPT checkpoint", extra="trained")
    try:
        ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message
        raise SpecError(f"{path}: cannot read a torch checkpoint: {exc}") from None
    if not isinstance(ckpt, dict) or "model_args" not in ckpt or "model" not in ckpt:
        raise SpecError(f"{path}: expected a nanoGPT checkpoint (a dict with 'model_args' and "
                        "'model')")
    args, state = ckpt["model_args"], ckpt["model"]
    if not isinstance(args, dict) or any(type(args.get(k)) is not int for k in ARGS):
        raise SpecError(f"{path}: model_args must give the integers {', '.join(ARGS)}")
    return args, {k.removeprefix("_orig_mod."): v for k, v in state.items()}


def is_nanogpt(path: Path) -> bool:
    return reads_as(path, read_checkpoint)


def load_nanogpt(path: str | Path) -> LMSpec:
    """Read a nanoGPT checkpoint; shapes checked against ``model_args``, NaN and infinite
    weights refused (:class:`SpecError`, naming the tensor)."""
    args, state = read_checkpoint(path)
    names = tensor_names(args["n_layer"], "transformer.")
    tensors: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if not hasattr(value, "is_floating_point") or not value.is_floating_point():
            raise SpecError(f"{path}: state dict entry {key} is not a float tensor")
        if key.endswith(".attn.bias") and value.dim() == 4:
            continue  # the causal-mask buffer of nanoGPT without flash attention
        arr = value.double().numpy()
        if key == "lm_head.weight":
            wte = state.get("transformer.wte.weight")
            if wte is None or not np.array_equal(arr, wte.double().numpy()):
                raise SpecError("lm_head.weight differs from transformer.wte.weight: nanoGPT "
                                "ties them")
            continue
        if key not in names:
            raise SpecError(f"{path}: tensor {key} is not part of a nanoGPT GPT "
                            "(unsupported layer)")
        ours = names[key]
        if arr.ndim == 2 and ours not in ("wte", "wpe"):
            arr = arr.T  # nn.Linear stores [out, in]
        tensors[ours] = np.ascontiguousarray(arr)
    d = args["n_embd"]
    return LMSpec(vocab_size=args["vocab_size"], context=args["block_size"], d_model=d,
                  heads=args["n_head"], layers=args["n_layer"], d_ff=4 * d,
                  activation="gelu_erf", layer_norm_eps=EPS, tied_head=True, tensors=tensors)


def nanogpt_logits(path: str | Path, tokens: np.ndarray, dtype: Any = None) -> np.ndarray:
    """nanoGPT's forward pass on the raw state dict in ``dtype`` (a torch dtype; default
    float64): logits ``[N, n, vocab]`` as float64."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    args, state = read_checkpoint(path)
    dtype = torch.float64 if dtype is None else dtype
    sd = {k: v.to(dtype) for k, v in state.items() if v.is_floating_point()}
    d, h = args["n_embd"], args["n_head"]

    def ln(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (d,), sd[name + ".weight"], sd.get(name + ".bias"), EPS)

    def lin(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))

    idx = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    b, n = idx.shape
    with torch.no_grad():
        x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:n]
        for i in range(args["n_layer"]):
            p = f"transformer.h.{i}."
            q, k, v = lin(ln(x, p + "ln_1"), p + "attn.c_attn").split(d, dim=2)
            q, k, v = (t.view(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + lin(y.transpose(1, 2).reshape(b, n, d), p + "attn.c_proj")
            x = x + lin(F.gelu(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
        logits = ln(x, "transformer.ln_f") @ sd["transformer.wte.weight"].T
    return logits.double().numpy()
