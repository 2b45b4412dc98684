"""LLaMA-style checkpoints (``LlamaForCausalLM``, Qwen2 with its q/k/v biases, Mistral): the
import equals ``transformers``' float64 forward pass (grouped-query attention, SwiGLU,
RMSNorm, rotary positions on every head dimension), every domain encloses the imported
function, options that are not read are refused by name, and its certificates check."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import lm_hf
import numpy as np
import pytest
from lm_hf import VOCAB, tokens

from exactmem.errors import SpecError
from exactmem.lm.decoder import INV_FREQ
from exactmem.lm.float64 import logits64
from exactmem.model.dataset import Dataset

pytest.importorskip("transformers")
pytest.importorskip("torch")

from exactmem.lm.checkpoints.live_module import lm_kind  # noqa: E402
from exactmem.lm.checkpoints.llama import llama_logits, load_llama  # noqa: E402


def llama(path: Path, kind: str = "Llama") -> Path:
    """A LLaMA-style model ``kind`` with two key/value heads for four query heads."""
    return lm_hf.saved_model(path, kind, num_key_value_heads=2, intermediate_size=128)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: Any) -> Path:
    return llama(tmp_path_factory.mktemp("llama"))


def test_import_equals_transformers(saved: Path) -> None:
    spec = load_llama(saved)
    assert lm_kind(saved) == "llama"
    assert (spec.n_kv, spec.rotary_dims, spec.gated_mlp, spec.norm) == (2, 16, True, "rmsnorm")
    toks = tokens(0, 6)
    ours, theirs = logits64(spec, toks), llama_logits(saved, spec, toks)
    # transformers' RMSNorm runs in float32 whatever the dtype: a float32-sized gap
    assert float(np.abs(ours - theirs).max()) < 1e-6 * float(np.abs(theirs).max())
    wrong = dataclasses.replace(spec, tensors={**spec.tensors, INV_FREQ: spec.get(INV_FREQ)[::-1]})
    assert float(np.abs(logits64(wrong, toks) - theirs).max()) > 1e-4  # rotary takes part


@pytest.mark.parametrize("kind", ["Qwen2", "Mistral"])
def test_qwen2_and_mistral(kind: str, tmp_path: Path) -> None:
    path = llama(tmp_path / kind, kind)
    spec = load_llama(path)
    assert lm_kind(path) == "llama"
    assert ("h0.attn.bias" in spec.tensors) == (kind == "Qwen2")  # Qwen2's q, k, v biases
    toks = tokens(2, 4)
    theirs = llama_logits(path, spec, toks)
    assert float(np.abs(logits64(spec, toks) - theirs).max()) < 1e-6 * float(
        np.abs(theirs).max())


def test_every_domain_encloses_the_function(saved: Path) -> None:
    proved, positions = lm_hf.check_domains(load_llama(saved), tokens(1, 8))
    assert proved >= 0.98 * positions
    lm_hf.check_onnx(load_llama(saved), tokens(1, 3, 11))


def test_the_balls_contain_transformers_with_exact_tables(saved: Path) -> None:
    """With its float32 steps made float64, transformers' logits lie in the norm balls:
    the certified function is the model's with exact rotary tables."""
    lm_hf.check_contains(load_llama(saved), saved, "LlamaForCausalLM", tokens(4, 4))


def test_sharded_and_single_file(saved: Path, tmp_path: Path) -> None:
    lm_hf.check_layouts(load_llama, saved, "LlamaForCausalLM", tmp_path, "50KB")


@pytest.mark.parametrize(("edit", "message"), [
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0}},
     "rope_type 'yarn' is not read"),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' is not read"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not read"),
    ({"head_dim": 32}, "head_dim 32 is not read"),
    ({"model_type": "gemma"}, "model_type 'gemma' is not read"),
])
def test_options_not_read_are_refused(saved: Path, tmp_path: Path, edit: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_llama(lm_hf.edited_copy(saved, tmp_path / "bad", edit))


def test_a_sliding_window_caps_the_context(saved: Path, tmp_path: Path) -> None:
    path = lm_hf.edited_copy(saved, tmp_path / "mistral", {"model_type": "mistral",
                                                     "sliding_window": 8})
    assert load_llama(path).context == 8


def test_a_certificate_is_written_and_checked(saved: Path, tmp_path: Path) -> None:
    """``certify_lm`` writes the certificate (grouped-query attention, rotary positions, the
    gated MLP with SiLU in its header) and the checker verifies the same count."""
    from exactmem.api.lm import certify_lm
    from exactmem.checker.lm.lm_verify import check

    spec = load_llama(saved)
    toks = tokens(5, 2)
    ys = logits64(spec, toks).argmax(-1)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=VOCAB,
                 sequences=tuple(map(tuple, toks.tolist())), labels=tuple(map(tuple, ys.tolist())))
    out = tmp_path / "c.json"
    res = certify_lm(saved, ds, out, partial=True, kind="llama")
    assert res.written and res.checked and res.proved >= 0.9 * res.positions
    cert = json.loads(out.read_text())
    m = cert["model"]
    assert (m["kv_heads"], m["rotary_dims"], m["gated_mlp"], m["activation"], m["norm"]) == \
        (2, 16, True, "silu", "rmsnorm")
    bad, unusable, claim = check(cert, tmp_path)
    assert not bad and claim is not None and claim.startswith(f"{res.proved} of 32 positions")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kv_heads", 3, "kv_heads: expected 0 or a divisor of heads = 4"),
    ("rotary_dims", 5, "rotary_dims: expected an even number from 0 to d_head = 16"),
    ("rotary_dims", 18, "rotary_dims: expected an even number"),
    ("norm_first", False, "parallel_residual: needs norm_first"),
])
def test_the_spec_refuses_bad_fields(saved: Path, field: str, value: object,
                                     message: str) -> None:
    spec = load_llama(saved)
    if field == "norm_first":
        spec = dataclasses.replace(spec, parallel_residual=True)
    with pytest.raises(SpecError, match=message):
        dataclasses.replace(spec, **{field: value})  # type: ignore[arg-type]
