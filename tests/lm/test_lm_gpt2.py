"""certify-model on a Hugging Face GPT-2 checkpoint: the acceptance case (2 layers, d = 32,
2 heads, vocab 64, context 16, random weights from a fixed seed, 200 sequences labelled with
the model's own float64 argmax), tampering, and bad input."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from lm_models import redigest  # noqa: E402

from exactmem.checker.cert_dataset import canonical  # noqa: E402
from exactmem.checker.verify import check_certificate  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled  # noqa: E402
from exactmem.model.dataset import Dataset, save_dataset  # noqa: E402


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint ``m/``, its 200 self-labelled sequences ``d.json`` and the first 6 of
    them ``small.json``."""
    folder = tmp_path_factory.mktemp("gpt2")
    random_gpt2(folder / "m", seed=0)
    ds = self_labelled(folder / "m", 200, 16, seed=0)
    save_dataset(ds, folder / "d.json")
    save_dataset(Dataset(task="seq2seq", inputs="token-ids", vocab_size=64,
                         sequences=ds.sequences[:6], labels=ds.labels[:6]), folder / "small.json")
    return folder


@pytest.fixture(scope="module")
def small_cert(gpt2: Path) -> dict[str, Any]:
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "small_c.json",
               "--partial", "-q") == 0
    return json.loads((gpt2 / "small_c.json").read_text())


def test_acceptance_200_sequences(gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certify-model", gpt2 / "m", gpt2 / "d.json", "-o", gpt2 / "c.json",
               "--partial", "--no-self-check", "-q") == 0  # checked once, below
    made = re.search(r"\((\d+) of (\d+) positions proved by the producer",
                     capsys.readouterr().out)
    assert made is not None
    k, m = int(made[1]), int(made[2])
    assert m == 3200 and k >= 0.98 * m
    assert run("check", gpt2 / "c.json", "-q") == 0
    out = capsys.readouterr().out
    assert f"c claim: {k} of {m} positions have the label as unique argmax" in out
    assert out.strip().endswith("s VERIFIED")


def test_a_changed_weight_is_rejected(small_cert: dict[str, Any]) -> None:
    cert = json.loads(json.dumps(small_cert))
    values = cert["model"]["tensors"]["h0.mlp.fc.weight"]["values"]
    values[7] = str(int(values[7]) + 1)
    report = check_certificate(cert, Path("."))
    assert not report.verified and "digest" in report.failures[0]
    values[7] = str(int(values[7]) - 1)
    bias = cert["model"]["tensors"]["lnf.bias"]  # + 64 on one coordinate, digest made to match
    bias["values"][5] = str(int(bias["values"][5]) + (64 << bias["scale"]))
    report = check_certificate(redigest(cert), Path("."))
    assert not report.verified and report.failures
    assert all(re.match(r"sequence \d+, position \d+: label", f) for f in report.failures)


def test_a_changed_label_is_no_longer_certified(gpt2: Path, small_cert: dict[str, Any],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert 3 in small_cert["claims"]["positions"][0]
    cert = json.loads(json.dumps(small_cert))
    data = cert["dataset"]["data"]
    data["labels"][0][3] = (data["labels"][0][3] + 1) % 64
    cert["dataset"]["sha256"] = hashlib.sha256(canonical(data).encode()).hexdigest()
    report = check_certificate(redigest(cert), Path("."))
    assert [f.split(":")[0] for f in report.failures] == ["sequence 0, position 3"]
    bad = gpt2 / "relabelled.json"
    bad.write_text(canonical(data) + "\n")
    capsys.readouterr()
    assert run("certify-model", gpt2 / "m", bad, "-o", gpt2 / "r.json", "--partial", "-q") == 0
    again = json.loads((gpt2 / "r.json").read_text())["claims"]["positions"]
    assert 3 not in again[0] and again[1:] == small_cert["claims"]["positions"][1:]
    assert run("certify-model", gpt2 / "m", bad, "-o", gpt2 / "all.json", "-q") == 1
    assert not (gpt2 / "all.json").exists()
    assert "sequence 0, position 3: not proved" in capsys.readouterr().err


def _copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_a_nan_weight_is_refused(gpt2: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors.torch import load_file, save_file

    m = _copy_model(gpt2 / "m", tmp_path / "m")
    sd = load_file(str(m / "model.safetensors"))
    sd["transformer.h.1.mlp.c_fc.weight"][3, 5] = float("nan")
    save_file(sd, str(m / "model.safetensors"), metadata={"format": "pt"})
    assert run("certify-model", m, gpt2 / "small.json", "-o", tmp_path / "c.json",
               "--partial", "-q") == 2
    assert not (tmp_path / "c.json").exists()
    assert "h1.mlp.fc.weight: a NaN or infinite weight at index [3, 5]" in capsys.readouterr().err


def test_shapes_that_do_not_match_the_config_are_refused(
        gpt2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _copy_model(gpt2 / "m", tmp_path / "m")
    cfg = json.loads((m / "config.json").read_text())
    cfg["n_inner"] = 64
    (m / "config.json").write_text(json.dumps(cfg))
    assert run("certify-model", m, gpt2 / "small.json", "-o", tmp_path / "c.json",
               "--partial", "-q") == 2
    err = capsys.readouterr().err
    assert re.search(r"tensor h0\.mlp\.fc\.\w+: shape \[(32, )?128\], expected \[(32, )?64\]", err)
    assert err.count("\n") == 1 and not (tmp_path / "c.json").exists()


def test_a_dataset_beyond_the_vocabulary_is_refused(
        gpt2: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_dataset(Dataset(task="seq2seq", inputs="token-ids", vocab_size=65,
                         sequences=((64, 1),), labels=((0, 1),)), tmp_path / "d.json")
    assert run("certify-model", gpt2 / "m", tmp_path / "d.json", "-o", tmp_path / "c.json",
               "--partial", "-q") == 2
    assert "exceeds the model's vocabulary of 64" in capsys.readouterr().err


def test_certificates_are_byte_identical(gpt2: Path, small_cert: dict[str, Any]) -> None:
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "again.json",
               "--partial", "-q") == 0
    assert (gpt2 / "again.json").read_bytes() == (gpt2 / "small_c.json").read_bytes()


def test_info_counts_the_claimed_positions(small_cert: dict[str, Any]) -> None:
    from exactmem.lm.certfile import lm_info

    cert = json.loads(json.dumps(small_cert))
    cert["claims"]["positions"][2] = [0, 5]
    got = lm_info(cert)
    assert (got["positions"], got["certified_positions"], got["sequences_in_full"]) == \
        (96, 82, 5)
    assert (got["params"], got["layers"], got["activation"]) == (28032, 2, "gelu_tanh")


def test_eps_zero_is_refused(gpt2: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    m = _copy_model(gpt2 / "m", tmp_path / "m")
    cfg = json.loads((m / "config.json").read_text())
    cfg["layer_norm_epsilon"] = 0.0
    (m / "config.json").write_text(json.dumps(cfg))
    assert run("certify-model", m, gpt2 / "small.json", "-o", tmp_path / "c.json",
               "--partial", "-q") == 2
    assert "layer_norm_eps is 0" in capsys.readouterr().err


def test_a_bound_dataset_is_found_by_the_checker(gpt2: Path) -> None:
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "bound.json",
               "--partial", "--bind-dataset", "-q") == 0
    cert = json.loads((gpt2 / "bound.json").read_text())
    assert cert["dataset"]["path"] == "small.json" and "data" not in cert["dataset"]
    assert run("check", gpt2 / "bound.json", "-q") == 0


def test_positions_the_checker_cannot_reprove_are_left_out(
        gpt2: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The producer's and the checker's bounds differ; certify-model writes only what the
    checker re-proves (with --partial) and fails otherwise."""
    from exactmem.checker.lm import lm_verify

    real = lm_verify.margin_failure

    def stricter(i, p, y, mids, rad, f):  # type: ignore[no-untyped-def]
        return "sequence 1, position 2: not re-proved" if (i, p) == (1, 2) else \
            real(i, p, y, mids, rad, f)

    monkeypatch.setattr(lm_verify, "margin_failure", stricter)
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "left.json",
               "--partial") == 0
    assert "1 positions proved by the producer are not re-proved" in capsys.readouterr().err
    claimed = json.loads((gpt2 / "left.json").read_text())["claims"]["positions"]
    assert 2 not in claimed[1] and sum(map(len, claimed)) == 95
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "none.json",
               "-q") == 2
    assert "self-check: the checker rejects" in capsys.readouterr().err
    assert not (gpt2 / "none.json").exists()


def test_producers_certify_the_same_positions(gpt2: Path, small_cert: dict[str, Any],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``--producer arb`` and ``--producer hybrid`` write the certificate the default
    (fast) one does on the acceptance model; an unknown producer is a usage error."""
    for producer in ("arb", "hybrid"):
        out = gpt2 / f"small_{producer}.json"
        assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", out, "--partial",
                   "-q", "--producer", producer) == 0
        assert json.loads(out.read_text()) == small_cert
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", gpt2 / "x.json",
            "--producer", "float")
    assert exc.value.code == 2


def test_no_self_check_writes_unchecked_and_says_so(gpt2: Path, small_cert: dict[str, Any],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-self-check`` writes the producer's positions without running the checker and
    says so; ``check`` then decides, here with the count of the checked default."""
    capsys.readouterr()
    out = gpt2 / "small_unchecked.json"
    assert run("certify-model", gpt2 / "m", gpt2 / "small.json", "-o", out, "--partial",
               "--no-self-check", "-q") == 0
    said = capsys.readouterr().out
    assert said.startswith(f"not checked yet: run exactmem check {out}")
    assert "certified" not in said
    cert = json.loads(out.read_text())
    assert "code_length_bits" not in cert["claims"]
    assert cert["claims"]["positions"] == small_cert["claims"]["positions"]
    assert run("check", out, "-q") == 0
    assert capsys.readouterr().out.strip().endswith("s VERIFIED")


def test_an_in_memory_transformers_model_gives_per_position_arrays(
        gpt2: Path, small_cert: dict[str, Any]) -> None:
    """``exactmem.certify_model`` on a live ``GPT2LMHeadModel`` with ``partial=True``: the
    positions of the CLI's certificate, as a boolean array, and the float64 margins."""
    import numpy as np
    from transformers import GPT2LMHeadModel

    import exactmem

    model = GPT2LMHeadModel.from_pretrained(str(gpt2 / "m"))
    res = exactmem.certify_model(model, gpt2 / "small.json", partial=True)
    assert res.certified.shape == res.float_margins.shape == (6, 16)
    want = np.zeros((6, 16), dtype=bool)
    for i, row in enumerate(small_cert["claims"]["positions"]):
        want[i, row] = True
    assert (res.certified == want).all() and int(res.certified.sum()) == res.proved
    assert (res.float_margins[res.certified] > 0).all()
    assert "your module (GPT2LMHeadModel)" in res.compared
