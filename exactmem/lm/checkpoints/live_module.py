"""A language model given as a live torch module: its own forward pass for the cross-check,
and its checkpoint when no file is given.

:func:`module_logits` runs a copy of the module in float64 (``eval``, no gradients) on
token ids and returns the logits of every position: the module's output, its first element
when it returns a tuple, or ``.logits`` (transformers' outputs); a module that returns only
the last position at inference (nanoGPT's ``GPT``) is called again with ``targets`` equal to
the tokens, which makes it return every position.

:func:`save_module` writes the checkpoint of a module of a layout the importers read: a
nanoGPT ``GPT`` (its ``config`` gives ``model_args``) or a stack in the layout of
:func:`~exactmem.lm.checkpoints.torch_encoder.reference_module` (the config read from the live
layers: their head count, norm placement, activation, widths and norms).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.optional import require


def _torch() -> Any:
    return require("torch", "a torch module", extra="trained")


def is_module(value: Any) -> bool:
    """Is ``value`` a torch ``nn.Module``?  Never imports torch: a module exists only once
    torch has been imported."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


HF_KINDS = {"gpt2": "gpt2", "gpt_neox": "gpt-neox", "llama": "llama", "qwen2": "llama",
            "mistral": "llama"}  # config.json's model_type -> the importer


def lm_kind(path: Path) -> str | None:
    """The importer that reads the checkpoint ``path`` ("gpt2", "gpt-neox", "llama",
    "nanogpt", "torch-encoder"), or ``None``.  A ``save_pretrained`` directory (or a weights
    file with ``config.json`` beside it) goes by its ``model_type``; another model type is
    refused by name (:class:`~exactmem.errors.SpecError`)."""
    from exactmem.lm.checkpoints.hf_files import model_type
    from exactmem.lm.checkpoints.nanogpt import is_nanogpt
    from exactmem.lm.checkpoints.torch_encoder import is_torch_encoder

    found = model_type(path)
    if found is not None:
        if found not in HF_KINDS:
            from exactmem.errors import SpecError

            raise SpecError(f"{path}: config.json model_type {found!r} is not read (read: "
                            f"{', '.join(HF_KINDS)})")
        return HF_KINDS[found]
    try:  # torch.save writes a zip archive (or, before torch 1.6, a pickle)
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return None
    if not (head == b"PK\x03\x04" or head[:1] == b"\x80"):
        return None  # a safetensors file: read without torch
    if is_nanogpt(path):
        return "nanogpt"
    return "torch-encoder" if is_torch_encoder(path) else None


def _nanogpt_config(module: Any) -> Any:
    from exactmem.lm.checkpoints.nanogpt import ARGS

    cfg = getattr(module, "config", None)
    return cfg if cfg is not None and all(hasattr(cfg, k) for k in ARGS) else None


def _transformers_gpt2(module: Any) -> bool:
    """A ``transformers`` GPT-2 model (``GPT2LMHeadModel``): its config says ``gpt2`` and it
    can ``save_pretrained``."""
    cfg = getattr(module, "config", None)
    return getattr(cfg, "model_type", None) == "gpt2" and hasattr(module, "save_pretrained")


def lm_layout(module: Any) -> bool:
    """Is the module a language model :func:`save_module` writes (a nanoGPT ``GPT``, a
    reference-layout encoder stack, a ``transformers`` GPT-2)?"""
    from exactmem.lm.checkpoints.torch_encoder import MODULES

    return _nanogpt_config(module) is not None or _transformers_gpt2(module) or \
        all(hasattr(module, k) for k in MODULES)


def module_logits(module: Any, tokens: np.ndarray) -> np.ndarray:
    """The module's own float64 logits ``[N, n, vocab]`` on ``tokens``."""
    torch = _torch()
    m = copy.deepcopy(module).double().eval()
    idx = torch.as_tensor(np.asarray(tokens), dtype=torch.long)

    def first(out: Any) -> Any:
        out = out[0] if isinstance(out, (tuple, list)) else out
        return getattr(out, "logits", out)

    try:
        with torch.no_grad():
            out = first(m(idx))
            if out.dim() == 3 and out.shape[1] == 1 and idx.shape[1] > 1:
                out = first(m(idx, idx))  # nanoGPT: every position only with targets
    except Exception as exc:  # noqa: BLE001 - the user's code: one message, not a traceback
        raise SpecError(f"the module's forward pass failed on the dataset's tokens: "
                        f"{type(exc).__name__}: {exc}") from None
    if tuple(out.shape[:2]) != tuple(idx.shape):
        raise SpecError(f"the module returns logits of shape {tuple(out.shape)}; expected "
                        f"[{idx.shape[0]}, {idx.shape[1]}, vocab] (every position)")
    return np.asarray(out.double().numpy())


def save_module(module: Any, path: str | Path) -> str:
    """Write ``module``'s checkpoint to ``path``; returns the importer kind ("gpt2": a
    ``save_pretrained`` directory at ``path``; "nanogpt" or "torch-encoder": a file)."""
    from exactmem.lm.checkpoints.nanogpt import ARGS
    from exactmem.lm.checkpoints.torch_encoder import MODULES, save_live_encoder

    torch = _torch()
    if _transformers_gpt2(module):
        module.save_pretrained(str(path), safe_serialization=True)
        return "gpt2"
    cfg = _nanogpt_config(module)
    if cfg is not None:
        args = {k: getattr(cfg, k) for k in (*ARGS, "bias", "dropout") if hasattr(cfg, k)}
        torch.save({"model": module.state_dict(), "model_args": args}, str(path))
        return "nanogpt"
    if all(hasattr(module, k) for k in MODULES):
        save_live_encoder(module, path)
        return "torch-encoder"
    raise SpecError(f"a {type(module).__name__} module: expected a transformers GPT-2, a "
                    "nanoGPT GPT (with its config) or a stack in the layout of "
                    "exactmem.lm.checkpoints.torch_encoder.reference_module")
