"""``exactmem info`` of a language-model certificate shows the certified bits without
``--json`` (docs/memorized-bits.md), the same figures ``--json`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from exactmem.cli import main


def test_info_prints_the_bits_of_a_language_model_certificate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    import torch
    from transformers import GPT2LMHeadModel

    from exactmem.api.lm import certify_lm
    from exactmem.lm.checkpoints.random_models import random_gpt2
    from exactmem.lm.tokens import next_token_dataset
    from exactmem.model.dataset import save_dataset

    random_gpt2(tmp_path / "m", seed=3, layers=1, d_model=16)
    model = GPT2LMHeadModel.from_pretrained(tmp_path / "m").double().eval()
    toks = np.random.default_rng(5).integers(0, 64, size=(3, 8))
    with torch.no_grad():  # greedy continuations: the last positions hold
        for t in range(4, 8):
            toks[:, t] = model(torch.tensor(toks[:, :t])).logits[:, -1].argmax(-1).numpy()
    save_dataset(next_token_dataset(toks, 64), tmp_path / "d.json")
    assert certify_lm(tmp_path / "m", tmp_path / "d.json", tmp_path / "c.json",
                      partial=True).written
    capsys.readouterr()
    assert main(["info", str(tmp_path / "c.json"), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert "certified_memorized_bits" in figures
    assert main(["info", str(tmp_path / "c.json")]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    for key in ("certified_memorized_bits", "float_memorized_bits",
                "certified_bits_per_param", "certified_code_length_bits"):
        assert lines[key] == str(figures[key]), key
