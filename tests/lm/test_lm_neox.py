"""GPT-NeoX (Pythia) checkpoints: the import equals ``transformers``' float64 forward pass
in every layout ``save_pretrained`` writes, every domain encloses the imported function
(rotary positions on a quarter of each head, parallel and sequential residuals), options
that are not read are refused by name, and its certificates check."""

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

from exactmem.lm.checkpoints.gpt_neox import gpt_neox_logits, load_gpt_neox  # noqa: E402
from exactmem.lm.checkpoints.live_module import lm_kind  # noqa: E402


def neox(path: Path, parallel: bool = True) -> Path:
    """A GPT-NeoX model with rotary positions on a quarter of each head."""
    return lm_hf.saved_model(path, "GPTNeoX", intermediate_size=256, rotary_pct=0.25,
                       use_parallel_residual=parallel)


@pytest.fixture(scope="module", params=[True, False], ids=["parallel", "sequential"])
def saved(request: Any, tmp_path_factory: Any) -> Path:
    return neox(tmp_path_factory.mktemp("neox"), request.param)


def test_import_equals_transformers(saved: Path) -> None:
    spec = load_gpt_neox(saved)
    assert lm_kind(saved) == "gpt-neox"
    assert (spec.rotary_dims, spec.d_head, spec.tied_head) == (4, 16, False)
    assert spec.parallel_residual == json.loads((saved / "config.json").read_text())[
        "use_parallel_residual"]
    toks = tokens(0, 6)
    ours, theirs = logits64(spec, toks), gpt_neox_logits(saved, spec, toks)
    assert float(np.abs(ours - theirs).max()) < 1e-6 * float(np.abs(theirs).max())
    # the parts take part: without rotary positions, or with the other residual form, the
    # logits are far from transformers'
    for other in (dataclasses.replace(spec, parallel_residual=not spec.parallel_residual),
                  dataclasses.replace(spec, tensors={**spec.tensors,
                                                     INV_FREQ: spec.get(INV_FREQ) * 0.5})):
        assert float(np.abs(logits64(other, toks) - theirs).max()) > 1e-4


def test_every_domain_encloses_the_function(saved: Path) -> None:
    proved, positions = lm_hf.check_domains(load_gpt_neox(saved), tokens(1, 8))
    assert proved >= 0.98 * positions
    lm_hf.check_onnx(load_gpt_neox(saved), tokens(1, 3, 11))


def test_the_balls_contain_transformers_with_exact_tables(saved: Path) -> None:
    """With its float32 steps made float64, transformers' logits lie in the norm balls:
    the certified function is the model's with exact rotary tables."""
    lm_hf.check_contains(load_gpt_neox(saved), saved, "GPTNeoXForCausalLM", tokens(4, 4))


def test_every_layout_reads_the_same(saved: Path, tmp_path: Path) -> None:
    lm_hf.check_layouts(load_gpt_neox, saved, "GPTNeoXForCausalLM", tmp_path, "100KB")


@pytest.mark.parametrize(("edit", "message"), [
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                          "partial_rotary_factor": 0.25}}, "rope_type 'linear' is not read"),
    ({"hidden_act": "relu"}, "hidden_act 'relu' is not read"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                          "partial_rotary_factor": 0.1875}}, "gives 3 rotary dims"),
    ({"model_type": "gpt_neo"}, "model_type 'gpt_neo' is not read"),
])
def test_options_not_read_are_refused(saved: Path, tmp_path: Path, edit: dict[str, Any],
                                      message: str) -> None:
    bad = lm_hf.edited_copy(saved, tmp_path / "bad", edit)
    with pytest.raises(SpecError, match=message):
        load_gpt_neox(bad)
    if "model_type" in edit:
        with pytest.raises(SpecError, match="model_type 'gpt_neo' is not read"):
            lm_kind(bad)


def test_a_certificate_is_written_and_checked(saved: Path, tmp_path: Path) -> None:
    """``certify_lm`` writes the certificate (rotary positions, the residual form in its
    header) and the checker, run on its own, verifies the same count."""
    from exactmem.api.lm import certify_lm
    from exactmem.checker.lm.lm_verify import check

    spec = load_gpt_neox(saved)
    toks = tokens(5, 2)
    ys = logits64(spec, toks).argmax(-1)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=VOCAB,
                 sequences=tuple(map(tuple, toks.tolist())), labels=tuple(map(tuple, ys.tolist())))
    out = tmp_path / "c.json"
    res = certify_lm(saved, ds, out, partial=True, kind="gpt-neox")
    assert res.written and res.checked and res.proved >= 0.9 * res.positions
    cert = json.loads(out.read_text())
    m = cert["model"]
    assert m["rotary_dims"] == 4 and m.get("parallel_residual", False) is spec.parallel_residual
    assert "kv_heads" not in m and "wpe" not in m["tensors"]
    bad, unusable, claim = check(cert, tmp_path)
    assert not bad and claim is not None and claim.startswith(f"{res.proved} of 32 positions")


def test_the_pipeline_proves_positions_without_a_certificate(saved: Path) -> None:
    """``certify_lm`` without an output: import, cross-check against transformers, the
    default producer, the checker in-process; nothing written."""
    from exactmem.api.lm import certify_lm

    spec = load_gpt_neox(saved)
    toks = tokens(3, 4)
    ys = logits64(spec, toks).argmax(-1)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=VOCAB,
                 sequences=tuple(map(tuple, toks.tolist())), labels=tuple(map(tuple, ys.tolist())))
    lines: list[str] = []
    res = certify_lm(saved, ds, None, partial=True, kind="gpt-neox", log=lines.append)
    assert res.proved >= 0.98 * res.positions and res.checked and not res.written
    assert "GPTNeoXForCausalLM" in res.compared
    assert not any(line.startswith("not checked") for line in lines)


def test_older_config_keys(saved: Path, tmp_path: Path) -> None:
    """``rotary_pct`` / ``rotary_emb_base`` (configs written before ``rope_parameters``)
    read as their successors."""
    old = lm_hf.edited_copy(saved, tmp_path / "old", {"rotary_pct": 0.5, "rotary_emb_base": 100.0},
                      drop=("rope_parameters",))
    spec = load_gpt_neox(old)
    assert spec.rotary_dims == 8
    want = [100.0 ** (-j / 4) for j in range(4)]  # theta^(-2j/r), r = 8, in float32
    assert np.allclose(spec.get(INV_FREQ), want, rtol=2 ** -23, atol=0)
