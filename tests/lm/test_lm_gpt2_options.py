"""GPT-2's ``scale_attn_by_inverse_layer_idx`` and ``scale_attn_weights = false``: read,
equal to ``transformers``' float64 forward pass, enclosed by every domain, and carried by
certificates that the checker verifies; a ``pytorch_model.bin`` checkpoint reads as its
safetensors twin."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from lm_hf import VOCAB, check_domains, check_onnx, save, tokens

from exactmem.checker.lm.lm_verify import check
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.float64 import logits64
from exactmem.model.dataset import Dataset

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from exactmem.lm.checkpoints.gpt2 import load_gpt2, torch_logits  # noqa: E402


@pytest.mark.parametrize(("inverse", "scaled", "field"), [
    (True, True, {"inverse_layer_scale": True}),
    (False, False, {"score_scale": False}),
])
def test_score_options(tmp_path: Path, inverse: bool, scaled: bool,
                       field: dict[str, bool]) -> None:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2,
                                  n_head=2, scale_attn_by_inverse_layer_idx=inverse,
                                  scale_attn_weights=scaled, initializer_range=0.1)
    path = save(transformers.GPT2LMHeadModel(cfg).eval(), tmp_path / "m")
    spec = load_gpt2(path)
    assert (spec.inverse_layer_scale, spec.score_scale) == (inverse, scaled)
    toks = tokens(0, 4)
    theirs = torch_logits(path, toks)
    assert float(np.abs(logits64(spec, toks) - theirs).max()) < 1e-12
    import dataclasses

    plain = dataclasses.replace(spec, inverse_layer_scale=False, score_scale=True)
    assert float(np.abs(logits64(plain, toks) - theirs).max()) > 1e-6  # the option matters
    proved, positions = check_domains(spec, tokens(1, 4))
    assert proved >= 0.98 * positions
    check_onnx(spec, tokens(1, 2))
    toks = tokens(2, 2)
    ys = logits64(spec, toks).argmax(-1)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=VOCAB,
                 sequences=tuple(map(tuple, toks.tolist())), labels=tuple(map(tuple, ys.tolist())))
    cert = build_lm_certificate(spec, ds, [list(range(ds.n))] * ds.N, True)
    assert {k: cert["model"][k] for k in field} == field
    assert "score_scale" not in build_lm_certificate(plain, ds, [[0], []], True)["model"]
    bad, _, claim = check(cert, tmp_path)
    assert not bad and claim is not None and claim.startswith(f"{2 * ds.n} of {2 * ds.n}")
    single = tmp_path / "bin"
    single.mkdir()
    shutil.copy(path / "config.json", single / "config.json")
    torch.save(transformers.GPT2LMHeadModel.from_pretrained(str(path)).state_dict(),
               single / "pytorch_model.bin")
    got = load_gpt2(single)
    assert all(np.array_equal(got.tensors[k], v) for k, v in spec.tensors.items())
