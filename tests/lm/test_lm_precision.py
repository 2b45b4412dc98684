"""The LM checker picks its working precision from the model: a network whose balls grow by
more than 116 bits is checked at more than 128 fractional bits, and proves there what 128
bits cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from exactmem.api.lm import certify_lm  # noqa: E402
from exactmem.checker.lm import lm_forward, lm_verify  # noqa: E402
from exactmem.checker.verify import check_certificate  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402


@pytest.fixture(scope="module")
def steep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 layers, d = 32, weights N(0, 1): the checker's radius grows by about 2**137."""
    folder = tmp_path_factory.mktemp("steep")
    random_gpt2(folder / "m", seed=0, layers=4, d_model=32, heads=2, vocab=64, context=16,
                std=1.0)
    save_dataset(self_labelled(folder / "m", 3, 16, seed=0), folder / "d.json")
    res = certify_lm(folder / "m", folder / "d.json", folder / "c.json", partial=True,
                     producer="arb", self_check=False)
    assert res.written and res.proved > 0
    return folder


def test_a_steep_model_is_checked_at_more_bits(steep: Path) -> None:
    cert = json.loads((steep / "c.json").read_text())
    report = check_certificate(cert, steep)
    assert report.verified, report.failures
    assert "rigorous bounds at 2^-176 " in (report.claim or "")


def test_at_128_bits_the_same_certificate_is_rejected(steep: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lm_verify, "prepared", lambda net, *_: net)  # no probe: 128 bits
    cert = json.loads((steep / "c.json").read_text())
    report = check_certificate(cert, steep)
    assert not report.verified
    assert report.totals is not None and report.totals["f"] == lm_forward.F
    assert any("is not proved the unique argmax" in f for f in report.failures)
