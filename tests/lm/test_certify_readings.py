"""Which function a language-model checkpoint is cross-checked as.  A config can mistype
what the tensors do not fix (the head count; an encoder stack's norm placement and
activation): the reference module built from that config agrees with the import, so the
float64 cross-check cannot see it.  certify-model says what it compared, compares the
config's reading with every other reading of the tensors on the labels and refuses (exit 2,
one line naming the alternatives) when another fits clearly better; through the API the
user's own module is the cross-check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import exactmem  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.errors import SpecError  # noqa: E402
from exactmem.lm.checkpoints.nanogpt import load_nanogpt, nanogpt_logits  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_encoder, random_nanogpt  # noqa: E402
from exactmem.lm.checkpoints.readings import alternatives  # noqa: E402
from exactmem.lm.checkpoints.torch_encoder import (  # noqa: E402
    encoder_logits,
    read_checkpoint,
    reference_module,
)

VOCAB = 16


def _data(logits: np.ndarray, toks: np.ndarray, path: Path) -> Path:
    """Labelled by the true model's float argmax."""
    path.write_text(json.dumps({
        "format": "exactmem.dataset/1", "task": "seq2seq", "inputs": "token-ids",
        "vocab_size": VOCAB, "sequences": toks.tolist(),
        "labels": logits.argmax(-1).tolist()}))
    return path


@pytest.fixture(scope="module")
def typo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An encoder stack trained pre-LN with GELU, saved as post-LN with ReLU; a nanoGPT
    checkpoint with 2 heads saved as 4.  ``*_user.pt`` hold the true configs."""
    folder = tmp_path_factory.mktemp("typo")
    toks = np.random.default_rng(4).integers(0, VOCAB, size=(4, 8))
    random_encoder(folder / "enc_user.pt", seed=1, norm_first=True, activation="gelu",
                   vocab=VOCAB)
    ck = torch.load(folder / "enc_user.pt", weights_only=True)
    ck["config"].update(norm_first=False, activation="relu")
    torch.save(ck, folder / "enc_typo.pt")
    _data(encoder_logits(folder / "enc_user.pt", toks), toks, folder / "enc_d.json")
    random_nanogpt(folder / "gpt_user.pt", seed=2, heads=2, vocab=VOCAB)
    ck = torch.load(folder / "gpt_user.pt", weights_only=True)
    ck["model_args"]["n_head"] = 4
    torch.save(ck, folder / "gpt_typo.pt")
    _data(nanogpt_logits(folder / "gpt_user.pt", toks), toks, folder / "gpt_d.json")
    return folder


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("name", "stated", "true"), [
    ("enc", "heads 2, post-LN, ReLU", "heads 2, pre-LN, GELU"),
    ("gpt", "heads 4", "heads 2")])
def test_a_mistyped_config_is_refused_naming_the_reading_that_fits(
        typo: Path, capsys: pytest.CaptureFixture[str], name: str, stated: str,
        true: str) -> None:
    code, out, err = _cli(capsys, "certify-model", typo / f"{name}_typo.pt",
                          typo / f"{name}_d.json", "-o", typo / f"{name}_c.json", "--partial")
    assert code == 2 and not (typo / f"{name}_c.json").exists()
    errors = [x for x in err.splitlines() if "error:" in x]
    assert len(errors) == 1 and f"its config's reading ({stated})" in errors[0]
    assert f"read as {true} fits 32" in errors[0] and "Traceback" not in err
    assert "reference module built from the saved config" in err
    # the true config: certified, the strict test passed too, and said what was compared
    code, out, err = _cli(capsys, "certify-model", typo / f"{name}_user.pt",
                          typo / f"{name}_d.json", "-o", typo / f"{name}_c.json", "--partial",
                          "--strict-config")
    assert code == 0 and "certified 32 of 32 positions" in out
    assert f"config reading ({true}) fits 32 of 32 labels" in err
    assert "not against your own module" in err


def test_the_user_s_module_is_the_cross_check_through_the_api(typo: Path) -> None:
    cfg, state = read_checkpoint(typo / "enc_user.pt")
    user = reference_module(cfg)
    user.load_state_dict(state)
    res: Any = exactmem.certify_model(user, typo / "enc_d.json", output=typo / "api.json",
                                      partial=True)
    assert res.written and res.proved == 32 and res.compared == "your module (EncoderLM)"
    assert json.loads((typo / "api.json").read_text())["model"]["architecture"] == \
        "pre-ln-decoder"
    with pytest.raises(SpecError, match="differ from your module"):  # the file's config
        exactmem.certify_model(typo / "enc_typo.pt", typo / "enc_d.json", partial=True,
                               module=user)


def test_the_readings_a_config_could_mistype(typo: Path) -> None:
    from exactmem.lm.checkpoints.readings import describe
    from exactmem.lm.checkpoints.torch_encoder import load_torch_encoder

    gpt = load_nanogpt(typo / "gpt_user.pt")  # d_model 32: heads 1, 2, 4, 8, 16, 32
    assert [describe(s, "nanogpt") for s in alternatives(gpt, "nanogpt")] == \
        ["heads 1", "heads 4", "heads 8", "heads 16", "heads 32"]
    enc = load_torch_encoder(typo / "enc_typo.pt")
    others = [describe(s, "torch-encoder") for s in alternatives(enc, "torch-encoder")]
    assert len(others) == 6 * 4 - 1 and "heads 2, pre-LN, GELU" in others
    assert all(s.tensors is enc.tensors for s in alternatives(enc, "torch-encoder"))


def test_a_module_that_returns_the_last_position_only_is_asked_for_every_position() -> None:
    """nanoGPT's GPT returns the last position at inference, every position with targets."""
    from exactmem.lm.checkpoints.live_module import is_module, lm_layout, module_logits

    class Last(torch.nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)

        def forward(self, idx: Any, targets: Any = None) -> Any:
            x = self.emb(idx)
            return (x if targets is not None else x[:, [-1], :]), None

    toks = np.array([[0, 1, 2], [3, 4, 0]])
    m = Last()
    out = module_logits(m, toks)
    assert out.shape == (2, 3, 3) and out.dtype == np.float64
    assert np.array_equal(out, m.emb.weight.detach().double().numpy()[toks])
    assert m.emb.weight.dtype == torch.float32  # the user's module is left as it was
    assert is_module(m) and not lm_layout(m) and not is_module({"w": 1})


def test_a_reading_with_the_same_logits_is_not_an_alternative(typo: Path) -> None:
    """With every attention score zero the head count changes nothing: no ambiguity, so
    even the strict test passes."""
    import dataclasses

    from exactmem.lm.checkpoints.readings import judge
    from exactmem.lm.float64 import logits64

    spec = load_nanogpt(typo / "gpt_user.pt")
    t = dict(spec.tensors)
    for i in range(spec.layers):  # zero the query block: uniform causal attention
        t[f"h{i}.attn.weight"] = t[f"h{i}.attn.weight"].copy()
        t[f"h{i}.attn.weight"][:, :spec.d_model] = 0
        t.pop(f"h{i}.attn.bias", None)
    flat = dataclasses.replace(spec, tensors=t)
    toks = np.random.default_rng(0).integers(0, VOCAB, size=(3, 8))
    z = logits64(flat, toks)
    res = judge(flat, "nanogpt", toks, z.argmax(-1).tolist(), z, strict=True)
    assert res.others == () and res.fits == 24
