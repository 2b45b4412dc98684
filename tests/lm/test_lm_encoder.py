"""certify-model on stacks of torch ``nn.TransformerEncoderLayer`` run as causal LMs
(docs/trained-models.md, "torch encoder stacks"): pre-LN and post-LN, GELU and ReLU, with and
without a final norm; tampering; the cross-check; bad input; the checker's strict fields."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lm_models import redigest  # noqa: E402

from exactmem.checker.cert_dataset import canonical  # noqa: E402
from exactmem.checker.verify import check_certificate  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_encoder, self_labelled_encoder  # noqa: E402
from exactmem.lm.checkpoints.torch_encoder import encoder_logits, load_torch_encoder  # noqa: E402
from exactmem.lm.float64 import logits64  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402

KINDS = {"pre_gelu": (True, "gelu", True), "post_relu": (False, "relu", False),
         "post_gelu": (False, "gelu", True), "pre_relu": (True, "relu", True)}


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def enc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per kind: the checkpoint ``m_KIND.pt`` (2 layers, d = 32, 2 heads, vocab 64, context
    16) and 8 self-labelled sequences ``d_KIND.json``."""
    folder = tmp_path_factory.mktemp("enc")
    for name, (nf, act, fin) in KINDS.items():
        path = random_encoder(folder / f"m_{name}.pt", seed=7, norm_first=nf, activation=act,
                              final_norm=fin)
        save_dataset(self_labelled_encoder(path, 8, 16, seed=7), folder / f"d_{name}.json")
    return folder


@pytest.fixture(scope="module")
def certs(enc: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name in ("pre_gelu", "post_relu"):
        assert run("certify-model", enc / f"m_{name}.pt", enc / f"d_{name}.json", "-o",
                   enc / f"c_{name}.json", "--partial", "-q") == 0
        out[name] = json.loads((enc / f"c_{name}.json").read_text())
    return out


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_is_certified_and_checked_with_the_same_count(
        enc: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cert = enc / f"k_{name}.json"
    assert run("certify-model", enc / f"m_{name}.pt", enc / f"d_{name}.json", "-o", cert,
               "--partial") == 0
    captured = capsys.readouterr()
    assert ("agree with the reference module built from the saved config (the "
            "nn.TransformerEncoderLayer stack's forward pass") in captured.err
    made = re.search(r"certified (\d+) of (\d+) positions", captured.out)
    assert made is not None and int(made[2]) == 128 and int(made[1]) >= 0.98 * 128
    assert run("check", cert, "-q") == 0
    assert f"c claim: {made[1]} of 128 positions" in capsys.readouterr().out
    model = json.loads(cert.read_text())["model"]
    nf, act, fin = KINDS[name]
    assert model["architecture"] == ("pre-ln-decoder" if nf else "post-ln-decoder")
    assert model["activation"] == ("relu" if act == "relu" else "gelu_erf")
    assert model.get("final_norm", True) is fin


@pytest.mark.parametrize("name", list(KINDS))
def test_the_spec_computes_torch_s_function(enc: Path, name: str) -> None:
    toks = np.random.default_rng(1).integers(0, 64, size=(3, 16))
    theirs = encoder_logits(enc / f"m_{name}.pt", toks)
    assert np.abs(theirs - logits64(load_torch_encoder(enc / f"m_{name}.pt"), toks)).max() < 1e-9


@pytest.mark.parametrize("name", ["pre_gelu", "post_relu"])
def test_a_changed_weight_is_rejected(certs: dict[str, dict[str, Any]], name: str) -> None:
    cert = json.loads(json.dumps(certs[name]))
    bias = cert["model"]["tensors"]["h1.ln2.bias"]  # + 64 on one coordinate, digest matching
    bias["values"][5] = str(int(bias["values"][5]) + (64 << bias["scale"]))
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and report.failures
    assert all(re.match(r"sequence \d+, position \d+: label", f) for f in report.failures)


@pytest.mark.parametrize("name", ["pre_gelu", "post_relu"])
def test_a_changed_label_is_no_longer_certified(enc: Path, certs: dict[str, dict[str, Any]],
                                                name: str) -> None:
    assert 3 in certs[name]["claims"]["positions"][0]
    cert = json.loads(json.dumps(certs[name]))
    data = cert["dataset"]["data"]
    data["labels"][0][3] = (data["labels"][0][3] + 1) % 64
    cert["dataset"]["sha256"] = hashlib.sha256(canonical(data).encode()).hexdigest()
    report = check_certificate(redigest(cert), Path("."))
    assert [f.split(":")[0] for f in report.failures] == ["sequence 0, position 3"]
    bad = enc / f"relabelled_{name}.json"
    bad.write_text(canonical(data) + "\n")
    assert run("certify-model", enc / f"m_{name}.pt", bad, "-o", enc / f"r_{name}.json",
               "--partial", "-q") == 0
    again = json.loads((enc / f"r_{name}.json").read_text())["claims"]["positions"]
    assert 3 not in again[0] and again[1:] == certs[name]["claims"]["positions"][1:]


@pytest.mark.parametrize("edit, where", [
    (lambda m: m.update(architecture="pre-ln-decoder"), "sequence"),
    (lambda m: m.update(activation="gelu_erf"), "sequence"),
    (lambda m: m.update(final_norm=True), "model.final_norm"),
    (lambda m: m.update(final_norm=0), "model.final_norm"),
    (lambda m: m.update(architecture="post-ln"), "model.architecture"),
    (lambda m: m.update(activation="gelu"), "model.activation"),
])
def test_the_checker_reads_the_new_fields_strictly(certs: dict[str, dict[str, Any]], edit: Any,
                                                   where: str) -> None:
    """Post-LN read as pre-LN, or ReLU as GELU, is another function: rejected; a malformed
    field is unusable, named."""
    cert = json.loads(json.dumps(certs["post_relu"]))
    edit(cert["model"])
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and report.failures[0].startswith(where)


def test_a_wrong_import_is_caught_by_the_cross_check(
        enc: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A loader that keeps in_proj_weight's [out, in] layout for q | k | v misreads it."""
    from exactmem.lm.checkpoints import torch_encoder

    real = torch_encoder.load_torch_encoder

    def wrong(path: str | Path):  # type: ignore[no-untyped-def]
        spec = real(path)
        w = spec.tensors["h0.attn.weight"]
        spec.tensors["h0.attn.weight"] = np.ascontiguousarray(w.T.reshape(w.shape))
        return spec

    monkeypatch.setattr(torch_encoder, "load_torch_encoder", wrong)
    assert run("certify-model", enc / "m_post_relu.pt", enc / "d_post_relu.json", "-o",
               enc / "x.json", "--partial", "-q") == 2
    assert "cross-check: the imported function's float64 logits differ" in capsys.readouterr().err
    assert not (enc / "x.json").exists()


def _save(path: Path, ckpt: dict[str, Any]) -> Path:
    torch.save(ckpt, str(path))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda c: c["state_dict"].update({"layers.0.rotary.inv_freq": torch.ones(4)}),
     "tensor layers.0.rotary.inv_freq is not part of the torch encoder layout"),
    (lambda c: c["state_dict"].update({"layers.1.linear1.bias": torch.zeros(7)}),
     "shape [7], expected [64]"),
    (lambda c: c["state_dict"]["layers.0.norm1.weight"].__setitem__(2, float("nan")),
     "a NaN or infinite weight"),
    (lambda c: c["config"].update(activation="silu"), "config.activation"),
    (lambda c: c["config"].pop("norm_first"), "config must have exactly the keys"),
])
def test_bad_checkpoints_are_one_line_exit_2(enc: Path, tmp_path: Path, change: Any,
                                             message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = torch.load(str(enc / "m_pre_gelu.pt"), weights_only=True)
    change(ckpt)
    bad = _save(tmp_path / "bad.pt", ckpt)
    assert run("certify-model", bad, enc / "d_pre_gelu.json", "-o", tmp_path / "c.json",
               "--format", "torch-encoder", "--partial", "-q") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("name", ["post_relu", "post_gelu"])
def test_fast_and_arb_producers_certify_the_same_positions(enc: Path, name: str) -> None:
    """The fast norm-ball producer handles post-LN, ReLU and a missing final norm; arb, the
    reference, proves the same positions, so the certificates are byte-identical."""
    for producer in ("fast", "arb"):
        assert run("certify-model", enc / f"m_{name}.pt", enc / f"d_{name}.json", "-o",
                   enc / f"p_{producer}.json", "--partial", "--producer", producer, "-q") == 0
    assert (enc / "p_fast.json").read_bytes() == (enc / "p_arb.json").read_bytes()


def test_fast_bounds_enclose_the_float_logits(enc: Path) -> None:
    """The fast producer's logit balls hold the float64 logits (a wrong step order or a
    missing norm would miss them by far more than rounding)."""
    from exactmem.lm.normballs import NormWeights, logit_bounds

    toks = np.random.default_rng(2).integers(0, 64, size=(4, 16))
    for name in ("post_relu", "post_gelu"):
        spec = load_torch_encoder(enc / f"m_{name}.pt")
        mid, rad = logit_bounds(NormWeights(spec), toks)
        floats = logits64(spec, toks)
        assert (np.abs(floats - mid) <= rad + 1e-9).all() and rad.max() < 1e-3


def test_certificates_are_byte_identical(enc: Path) -> None:
    for out in ("b1.json", "b2.json"):
        assert run("certify-model", enc / "m_post_gelu.pt", enc / "d_post_gelu.json", "-o",
                   enc / out, "--format", "torch-encoder", "--partial", "-q") == 0
    assert (enc / "b1.json").read_bytes() == (enc / "b2.json").read_bytes()
