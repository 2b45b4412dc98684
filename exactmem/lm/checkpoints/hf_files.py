"""Reading a Hugging Face ``save_pretrained`` checkpoint: ``config.json`` and the weights in
every layout ``transformers`` writes (docs/trained-models.md, "Checkpoint layouts"):
``model.safetensors``; sharded safetensors with ``model.safetensors.index.json``;
``pytorch_model.bin`` (and its sharded index), read with ``torch.load(weights_only=True)``;
or one weights file given directly, with ``config.json`` beside it.  Every tensor comes back
as float64 (every float32 / float16 / bfloat16 number is exactly a float64).

Also the steps the importers of ``nn.Linear`` checkpoints (:mod:`.gpt_neox`, :mod:`.llama`)
share: the attention shape of the config, the rotary options, the tensor-name table of the
blocks, the tensors under the spec's names (:func:`linear_tensors`), and the checkpoint's
own forward pass in ``transformers`` (:func:`hf_logits`, GPT-2's too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.optional import require

SAFE, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"


def checkpoint_dir(path: str | Path) -> Path:
    """The directory holding ``config.json``: ``path`` or, for a weights file, its folder."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def model_type(path: str | Path) -> str | None:
    """``config.json``'s ``model_type`` (``None`` when there is no readable config)."""
    cfg = checkpoint_dir(path) / "config.json"
    if not cfg.is_file() or not (Path(path).is_dir() or Path(path).suffix in (".safetensors",
                                                                              ".bin")):
        return None
    try:
        kind = json.loads(cfg.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def read_config(path: str | Path, expected: tuple[str, ...]) -> dict[str, Any]:
    """``config.json`` of the checkpoint ``path``, its ``model_type`` one of ``expected``."""
    file = checkpoint_dir(path) / "config.json"
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError(f"{file}: cannot read it: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("model_type") not in expected:
        found = cfg.get("model_type") if isinstance(cfg, dict) else cfg
        raise SpecError(f"{file}: model_type {found!r} is not read here (read: "
                        f"{', '.join(expected)})")
    return cfg


def weight_files(path: str | Path) -> list[Path]:
    """The weights files of the checkpoint ``path`` (module docstring), in index order."""
    path = Path(path)
    if path.is_file():
        return [path]
    for index in (SAFE_INDEX, BIN_INDEX):
        if (path / index).is_file():
            try:
                wmap = json.loads((path / index).read_text(encoding="utf-8"))["weight_map"]
                names = sorted(set(wmap.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise SpecError(f"{path / index}: cannot read its weight_map: {exc}") from None
            if not all(isinstance(n, str) and "/" not in n and "\\" not in n for n in names):
                raise SpecError(f"{path / index}: a shard name outside the directory")
            missing = [n for n in names if not (path / n).is_file()]
            if missing:
                raise SpecError(f"{path / index}: shard {missing[0]} is missing")
            return [path / n for n in names]
    for name in (SAFE, BIN):
        if (path / name).is_file():
            return [path / name]
    raise SpecError(f"{path}: no weights (expected {SAFE}, {SAFE_INDEX}, {BIN} or {BIN_INDEX})")


def _load(file: Path) -> dict[str, Any]:
    torch = require("torch", "reading a checkpoint", extra="trained")
    safetensors = None
    if file.suffix == ".safetensors":
        safetensors = require("safetensors.torch", "reading safetensors", extra="trained")
    try:
        if safetensors is not None:
            state = safetensors.load_file(str(file))
        else:
            state = torch.load(str(file), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message
        raise SpecError(f"{file}: cannot read it: {exc}") from None
    if not isinstance(state, dict):
        raise SpecError(f"{file}: expected a state dict, found {type(state).__name__}")
    return dict(state)


def read_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint ``path`` as float64 (a name in two shards, or a tensor
    that is not a float, is refused by name)."""
    out: dict[str, np.ndarray] = {}
    for file in weight_files(path):
        for key, value in _load(file).items():
            if not hasattr(value, "is_floating_point") or not value.is_floating_point():
                raise SpecError(f"{file}: tensor {key} has dtype "
                                f"{getattr(value, 'dtype', type(value).__name__)}, expected "
                                "a float type")
            if key in out:
                raise SpecError(f"{file}: tensor {key} is stored twice")
            out[key] = value.double().numpy()
    return out


def attention_shape(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """``(hidden_size, num_attention_heads, num_hidden_layers)`` of a GPT-NeoX or LLaMA-style
    config, the head count dividing the width."""
    d, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    if heads < 1 or d % heads:
        raise SpecError(f"config.json: num_attention_heads {heads} does not divide "
                        f"hidden_size {d}")
    return d, heads, int(cfg["num_hidden_layers"])


def block_names(prefix: str, layers: int, block: dict[str, str]) -> dict[str, str]:
    """The tensor names of ``layers`` blocks: ``{prefix}{i}.{theirs}.{weight,bias}`` ->
    ``h{i}.{ours}.{weight,bias}`` for each ``theirs -> ours`` of ``block``."""
    return {f"{prefix}{i}.{theirs}.{kind}": f"h{i}.{ours}.{kind}" for i in range(layers)
            for theirs, ours in block.items() for kind in ("weight", "bias")}


def linear_tensors(path: str | Path, raw: dict[str, np.ndarray], names: dict[str, str],
                   ignored: tuple[str, ...], family: str, tied: bool, embed: str
                   ) -> dict[str, np.ndarray]:
    """The tensors ``raw`` of a checkpoint of ``nn.Linear`` layers under the spec's names
    (``names``): buffers ending in ``ignored`` skipped; a tensor of no part of the function,
    or two stored under one spec name, refused by name; the head, when ``tied``, checked
    equal to the embedding ``embed`` and dropped; linear weights transposed from
    ``nn.Linear``'s ``[out, in]`` to the spec's ``[in, out]``."""
    out: dict[str, np.ndarray] = {}
    seen: dict[str, str] = {}
    for key, value in raw.items():
        if key.endswith(ignored):
            continue
        if key not in names:
            raise SpecError(f"{path}: tensor {key} is not part of a {family} causal LM "
                            "(unsupported layer)")
        ours = names[key]
        if ours in seen:
            raise SpecError(f"{path}: both {seen[ours]} and {key} (one {ours})")
        seen[ours] = key
        if ours == "head" and tied:
            if not np.array_equal(value, raw.get(embed, value)):
                raise SpecError(f"{key} differs from {embed} although tie_word_embeddings "
                                "is true")
            continue
        if value.ndim == 2 and ours not in ("wte", "head"):
            value = value.T
        out[ours] = np.ascontiguousarray(value)
    return out


def refuse_rope_scaling(cfg: dict[str, Any]) -> None:
    """Rotary scaling variants are not read: refused by name (``rope_scaling`` or
    ``rope_parameters.rope_type`` other than ``default``)."""
    for key in ("rope_scaling", "rope_parameters"):
        val = cfg.get(key)
        if isinstance(val, dict):
            kind = val.get("rope_type", val.get("type", "default"))
            if kind != "default":
                raise SpecError(f"config.json: {key} rope_type {kind!r} is not read (read: "
                                "default rotary positions, rope_theta and "
                                "partial_rotary_factor)")
        elif val is not None:
            raise SpecError(f"config.json: {key} = {val!r} is not read")


def rope_value(cfg: dict[str, Any], key: str, old: str, default: float) -> float:
    """``rope_parameters[key]`` (today's configs), else ``cfg[key]``, else ``cfg[old]``."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and key in params:
        return float(params[key])
    if key in cfg:
        return float(cfg[key])
    return float(cfg.get(old, default))


def inv_freq(theta: float, dim: int) -> np.ndarray:
    """The rotary frequencies as ``transformers`` computes them (its default rope): in
    float32, ``1 / theta ** (arange(0, dim, 2) / dim)`` by torch itself, returned exactly as
    float64 (the cross-check compares them with the model's own ``inv_freq`` buffer)."""
    import torch

    ar = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float)
    return (1.0 / (theta ** (ar / dim))).double().numpy()


def hf_chunks(path: str | Path, cls: str, tokens: np.ndarray,
              spec_inv_freq: np.ndarray | None = None, dtype: str = "float64",
              attention: str = "sdpa", step: int = 256) -> Iterator[np.ndarray]:
    """The checkpoint's own forward pass (``transformers.<cls>`` loaded once in ``dtype``,
    eval mode, ``attention`` the ``attn_implementation``: torch's scaled-dot-product
    attention by default, as the eager path of GPT-NeoX computes the softmax in float32):
    logits ``[B, n, vocab]`` as float64, ``step`` sequences at a time.  With
    ``spec_inv_freq``, the model's rotary ``inv_freq`` buffers must equal the imported
    frequencies exactly."""
    torch = require("torch", "the cross-check", extra="trained")
    transformers = require("transformers", "the cross-check")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    model = getattr(transformers, cls).from_pretrained(
        str(checkpoint_dir(path)), dtype=getattr(torch, dtype), attn_implementation=attention)
    model.eval()
    if spec_inv_freq is not None:
        for name, buf in model.named_buffers():
            if name.endswith("inv_freq") and not np.array_equal(buf.double().numpy(),
                                                                spec_inv_freq):
                raise SpecError(f"cross-check: the model's {name} differs from the imported "
                                "rotary frequencies")
    with torch.no_grad():
        for b in range(0, len(tokens), step):
            ids = torch.as_tensor(np.asarray(tokens[b:b + step]), dtype=torch.long)
            yield model(ids).logits.double().numpy()


def hf_logits(path: str | Path, cls: str, tokens: np.ndarray,
              spec_inv_freq: np.ndarray | None = None, dtype: str = "float64",
              attention: str = "sdpa") -> np.ndarray:
    """:func:`hf_chunks` as one array ``[N, n, vocab]``."""
    return np.concatenate(list(hf_chunks(path, cls, tokens, spec_inv_freq, dtype, attention)))
