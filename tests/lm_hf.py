"""Small ``transformers`` causal LMs saved with ``save_pretrained`` for the GPT-NeoX and
LLaMA-style import tests, their edited copies, and the checks every layout and every domain
must pass on them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flint
import numpy as np

from exactmem.lm import balls as I
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64
from exactmem.lm.normballs import NormWeights, logit_bounds
from exactmem.lm.positions import prove_positions

VOCAB, CONTEXT = 50, 16
#: the shape every test model shares (the MLP width is each family's)
SHAPE = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": CONTEXT, "initializer_range": 0.1}


def save(model: Any, path: Path, **kw: Any) -> Path:
    """``model.save_pretrained(path, **kw)`` without progress bars."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    model.save_pretrained(str(path), **kw)
    return path


def saved_model(path: Path, kind: str, **config: Any) -> Path:
    """A ``transformers.<kind>ForCausalLM`` of :data:`SHAPE` and ``config``, its weights drawn
    after ``torch.manual_seed(0)``, saved at ``path``."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, kind + "Config")(**{**SHAPE, **config})
    return save(getattr(transformers, kind + "ForCausalLM")(cfg).eval(), path)


def edited_copy(saved: Path, path: Path, edit: dict[str, Any], drop: Sequence[str] = ()
                ) -> Path:
    """A copy of the checkpoint directory ``saved`` at ``path``, its ``config.json`` updated
    with ``edit`` and without the keys ``drop``."""
    shutil.copytree(saved, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in drop}
    (path / "config.json").write_text(json.dumps({**cfg, **edit}))
    return path


def check_layouts(load: Callable[[Path], LMSpec], saved: Path, cls: str, tmp_path: Path,
                  shard: str) -> None:
    """Sharded safetensors (shards of at most ``shard``), ``pytorch_model.bin`` (the
    directory and the file) and ``model.safetensors`` itself read to the same tensors."""
    import torch
    import transformers

    spec = load(saved)
    model = getattr(transformers, cls).from_pretrained(str(saved))
    sharded = save(model, tmp_path / "sharded", max_shard_size=shard)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    single = tmp_path / "single"
    single.mkdir()
    shutil.copy(saved / "config.json", single / "config.json")
    torch.save(model.state_dict(), single / "pytorch_model.bin")
    for where in (sharded, single, single / "pytorch_model.bin", saved / "model.safetensors"):
        got = load(where)
        assert got.tensors.keys() == spec.tensors.keys()
        assert all(np.array_equal(got.tensors[k], v) for k, v in spec.tensors.items())


def tokens(seed: int, count: int, n: int = CONTEXT) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (count, n))


def check_domains(spec: LMSpec, toks: np.ndarray) -> tuple[int, int]:
    """Norm balls contain the float64 logits; arb balls (every block in arb) meet the norm
    balls and are tight around the float64 logits; torch (float64) agrees with float64.
    Returns ``(proved, positions)`` of the norm-ball producer on the float64 argmax."""
    import torch

    from exactmem.lm.torchrun import torch_logits

    z = logits64(spec, toks)
    with np.errstate(all="ignore"):
        mid, rad = logit_bounds(NormWeights(spec), toks)
    lo, hi = I.lohi((mid, rad))
    assert (lo <= z).all() and (z <= hi).all()
    assert float(rad.max()) < 1e-4 * max(1.0, float(np.abs(z).max()))
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    old = flint.ctx.prec
    try:
        prove_positions(spec, toks[:2].tolist(), z[:2].argmax(-1).tolist(), producer="arb",
                        on_logits=lambda i, a, b: seen.append((a, b)))
    finally:
        flint.ctx.prec = old
    for i, (a, b) in enumerate(seen):  # both contain the exact logits: they meet
        assert (np.maximum(a, lo[i]) <= np.minimum(b, hi[i])).all()
        assert float(np.abs(a - z[i]).max()) < 1e-9 and float((b - a).max()) < 1e-9
    state = {k: torch.from_numpy(v) for k, v in spec.tensors.items()}
    assert float(np.abs(torch_logits(spec, state, toks) - z).max()) < 1e-12
    fast = prove_positions(spec, toks.tolist(), z.argmax(-1).tolist(), producer="fast")
    return fast.count, int(toks.size)


def check_onnx(spec: LMSpec, toks: np.ndarray) -> None:
    """The float64 ONNX graph computes the float64 logits (where onnxruntime is installed)."""
    import pytest

    ort = pytest.importorskip("onnxruntime")
    from exactmem.lm.onnx_graph import build_onnx

    sess = ort.InferenceSession(build_onnx(spec, "float64").SerializeToString(),
                                providers=["CPUExecutionProvider"])
    z = logits64(spec, toks)
    assert float(np.abs(sess.run(["logits"], {"tokens": toks})[0] - z).max()) < 1e-12


def float64_transformers_logits(path: Path, cls: str, toks: np.ndarray) -> np.ndarray:
    """transformers' forward pass in float64 with its two float32 steps made float64: the
    rotary tables (``cos``/``sin`` of ``p omega_j``, computed in float32 by the library) and
    LLaMA's RMSNorm (computed in float32 whatever the dtype).  That is the certified function
    (docs/trained-models.md, "Which rotary function is certified") evaluated in float64, so
    the rigorous norm balls must contain these logits."""
    import torch
    import transformers

    model = getattr(transformers, cls).from_pretrained(
        str(path), dtype=torch.float64, attn_implementation="sdpa").eval()

    def rotary(self: Any, x: Any, position_ids: Any) -> tuple[Any, Any]:
        freqs = position_ids[..., None].double() * self.inv_freq.double()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rmsnorm(self: Any, h: Any) -> Any:
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))

    for mod in model.modules():
        name = type(mod).__name__
        if name.endswith("RotaryEmbedding"):
            mod.forward = rotary.__get__(mod)
        elif name.endswith("RMSNorm"):
            mod.forward = rmsnorm.__get__(mod)
    with torch.no_grad():
        return model(torch.as_tensor(toks)).logits.double().numpy()


def check_contains(spec: LMSpec, path: Path, cls: str, toks: np.ndarray) -> None:
    """The norm balls contain transformers' float64 logits with float64 tables and norms."""
    theirs = float64_transformers_logits(path, cls, toks)
    with np.errstate(all="ignore"):
        lo, hi = I.lohi(logit_bounds(NormWeights(spec), toks))
    assert (lo <= theirs).all() and (theirs <= hi).all()
