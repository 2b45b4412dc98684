"""certify-model's float64 stage and producer a batch at a time (:mod:`exactmem.lm.float_pass`,
:mod:`exactmem.lm.batching`): batches sized from the model's shape, never the dataset's, and
the same positions, margins and code lengths whatever the batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from exactmem.api.lm import certify_lm  # noqa: E402
from exactmem.lm import batching  # noqa: E402
from exactmem.lm.checkpoints.gpt2 import load_gpt2, torch_logits  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2  # noqa: E402
from exactmem.lm.codelength import code_length_float  # noqa: E402
from exactmem.lm.float64 import label_margin, logits64  # noqa: E402
from exactmem.lm.float_pass import float_pass  # noqa: E402
from exactmem.lm.tokens import next_token_dataset  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fpass")
    model = random_gpt2(root / "m", seed=3, layers=1, d_model=16)
    vocab = int(json.loads((root / "m" / "config.json").read_text())["vocab_size"])
    spec = load_gpt2(model)
    toks = np.random.default_rng(8).integers(0, vocab, size=(9, 7))
    for t in range(1, 7):  # greedy: each token the float64 argmax, so positions prove
        toks[:, t] = logits64(spec, toks[:, :t])[:, -1].argmax(-1)
    save_dataset(next_token_dataset(toks, vocab), root / "d.json")
    return {"root": root, "model": model, "toks": toks, "spec": spec}


def test_batches_follow_the_shape() -> None:
    class Shape:
        vocab_size, d_ff, d_model = 50_257, 3_072, 768

    assert batching.batch_for(Shape(), 1024) == 1  # GPT-2 small at context 1,024
    assert batching.batch_for(Shape(), 16) == 10
    Shape.vocab_size, Shape.d_ff, Shape.d_model = 64, 64, 16
    assert batching.batch_for(Shape(), 16) == batching.MAX_BATCH


def test_the_float_pass_keeps_what_the_whole_logits_give(case: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    spec, toks = case["spec"], case["toks"]
    labels = np.roll(toks, -1, axis=1)
    whole = logits64(spec, toks)
    monkeypatch.setattr(batching, "CELLS", 1)  # one sequence a batch
    got = float_pass(spec, toks, labels.tolist(),
                     lambda t: torch_logits(case["model"], t), keep=4)
    assert got.head.shape == (4, *whole.shape[1:])
    np.testing.assert_allclose(got.head, whole[:4], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.margins, label_margin(whole, labels), rtol=0, atol=1e-12)
    want = [code_length_float(x, y) for x, y in zip(whole, labels, strict=True)]
    np.testing.assert_allclose(got.code_lengths, want, rtol=1e-12)
    assert 0 < got.gap < 1e-9 and got.scale == pytest.approx(np.abs(whole).max())


def test_certify_model_in_batches_of_one_writes_the_same_certificate(
        case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    root: Path = case["root"]
    one = certify_lm(case["model"], root / "d.json", root / "a.json", partial=True)
    monkeypatch.setattr(batching, "CELLS", 1)
    small = certify_lm(case["model"], root / "d.json", root / "b.json", partial=True)
    assert one.written and small.written and one.proved > 0
    assert (root / "a.json").read_bytes() == (root / "b.json").read_bytes()
    assert small.code_lengths == one.code_lengths
