"""certify-model on nanoGPT-style checkpoints (``model_args`` + state dict, nn.Linear
weights, nn.GELU() erf form), with and without biases; the cross-check catches a wrong
import."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_nanogpt, self_labelled  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def nano(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nano")
    for bias in (True, False):
        ckpt = random_nanogpt(folder / f"m{int(bias)}.pt", seed=3, bias=bias)
        save_dataset(self_labelled(ckpt, 12, 16, seed=3), folder / f"d{int(bias)}.json")
    return folder


@pytest.mark.parametrize("bias", [1, 0])
def test_a_nanogpt_checkpoint_is_certified_and_checked(
        nano: Path, bias: int, capsys: pytest.CaptureFixture[str]) -> None:
    cert = nano / f"c{bias}.json"
    assert run("certify-model", nano / f"m{bias}.pt", nano / f"d{bias}.json", "-o", cert,
               "--partial") == 0
    captured = capsys.readouterr()
    assert ("agree with the reference module built from the saved config (nanoGPT's "
            "forward pass (torch))") in captured.err
    made = re.search(r"certified (\d+) of (\d+) positions", captured.out)
    assert made is not None and int(made[1]) >= 0.98 * int(made[2]) == 0.98 * 192
    assert run("check", cert, "-q") == 0
    assert f"c claim: {made[1]} of 192 positions" in capsys.readouterr().out


def test_the_cross_check_catches_a_wrong_import(nano: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A loader that forgets nn.Linear's [out, in] layout for one square matrix gives a
    model of the right shapes but another function: refused before any bounds."""
    from exactmem.lm.checkpoints import nanogpt as gpt2_nanogpt

    real = gpt2_nanogpt.load_nanogpt

    def wrong(path: str | Path):  # type: ignore[no-untyped-def]
        spec = real(path)
        spec.tensors["h1.attn.proj.weight"] = np.ascontiguousarray(
            spec.tensors["h1.attn.proj.weight"].T)
        return spec

    monkeypatch.setattr(gpt2_nanogpt, "load_nanogpt", wrong)
    assert run("certify-model", nano / "m1.pt", nano / "d1.json", "-o", nano / "x.json",
               "--partial", "-q") == 2
    assert "cross-check: the imported function's float64 logits differ" in capsys.readouterr().err
    assert not (nano / "x.json").exists()


def test_an_untied_head_and_an_unknown_layer_are_refused(
        nano: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = torch.load(str(nano / "m1.pt"), weights_only=True)
    ckpt["model"]["lm_head.weight"] = ckpt["model"]["lm_head.weight"] + 1
    torch.save(ckpt, str(tmp_path / "untied.pt"))
    assert run("certify-model", tmp_path / "untied.pt", nano / "d1.json", "-o",
               tmp_path / "c.json", "--format", "nanogpt", "--partial", "-q") == 2
    assert "lm_head.weight differs from transformer.wte.weight" in capsys.readouterr().err
    ckpt = torch.load(str(nano / "m1.pt"), weights_only=True)
    ckpt["model"]["transformer.h.0.attn.rotary.inv_freq"] = torch.ones(4)
    torch.save(ckpt, str(tmp_path / "rope.pt"))
    assert run("certify-model", tmp_path / "rope.pt", nano / "d1.json", "-o",
               tmp_path / "c.json", "--partial", "-q") == 2
    err = capsys.readouterr().err
    assert "transformer.h.0.attn.rotary.inv_freq is not part of a nanoGPT GPT" in err
    assert err.count("\n") == 1 and not (tmp_path / "c.json").exists()
