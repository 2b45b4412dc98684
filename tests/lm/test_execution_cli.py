"""``certify-model --execution`` on a Hugging Face GPT-2 checkpoint (1 layer, d 32, random
weights of std 0.02): the execution claim beside the real-valued one, ``check``'s claim
line, ``info --json``, and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpt2x")
    random_gpt2(folder / "m", seed=0, layers=1, std=0.02, bias_std=0.01)
    save_dataset(self_labelled(folder / "m", 4, 16, seed=0), folder / "d.json")
    return folder


def test_certify_check_info(gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certify-model", gpt2 / "m", gpt2 / "d.json", "-o", gpt2 / "c.json",
               "--partial", "--execution", "float32", "-q") == 0
    out = capsys.readouterr().out
    assert "positions in every float32 execution (exp/tanh/erf/rsqrt within 2 ulps)" in out
    cert = json.loads((gpt2 / "c.json").read_text())
    ex = cert["claims"]["execution"]
    assert (ex["format"], ex["ulps"]) == ("float32", 2)
    k = sum(map(len, ex["positions"]))
    assert k >= 24  # of 64 (measured: 31)
    assert run("check", gpt2 / "c.json", "-q") == 0
    out = capsys.readouterr().out
    assert f"c claim: {k} of 64 positions have the label as unique argmax in every float32 " \
           "execution (model: float32; any summation order;" in out
    assert run("info", gpt2 / "c.json", "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["execution"]["certified_positions"] == k
    assert info["execution"]["format"] == "float32"


def test_refusals(gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certify-model", gpt2 / "m", gpt2 / "d.json", "-o", gpt2 / "x.json",
               "--partial", "--ulps", "3", "-q") == 2
    assert "--ulps: only with --execution" in capsys.readouterr().err
    assert run("certify-model", gpt2 / "m", gpt2 / "d.json", "-o", gpt2 / "x.json",
               "--partial", "--execution", "float32", "--ulps", "0", "-q") == 2
    assert "--ulps" in capsys.readouterr().err
    assert not (gpt2 / "x.json").exists()


@pytest.fixture(scope="module")
def exec_cert(gpt2: Path) -> tuple[Path, int]:
    """A certificate with a float32 execution claim, and the positions it claims."""
    cert = gpt2 / "e.json"
    assert run("certify-model", gpt2 / "m", gpt2 / "d.json", "-o", cert, "--partial",
               "--execution", "float32", "-q") == 0
    return cert, sum(map(len, json.loads(cert.read_text())["claims"]["execution"]["positions"]))


def test_export_states_the_execution_claim_as_proof(gpt2: Path, exec_cert: tuple[Path, int],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cert, k = exec_cert
    assert run("export", cert, "--format", "safetensors", "--dtype", "float32", "-o",
               gpt2 / "e32.safetensors") == 0
    out = capsys.readouterr().out
    assert (f"proved for every float32 execution: the label is the unique argmax at {k} "
            "certified positions (the certificate's execution claim, exp/tanh/erf/rsqrt "
            "within 2 ulps, re-proved by the checker; no run is needed for these)") in out
    assert "outside the execution model" not in out
    assert run("export", cert, "--format", "safetensors", "--dtype", "float64", "-o",
               gpt2 / "e64.safetensors") == 0
    assert "proved for every" not in capsys.readouterr().out  # the claim is about float32


def test_precision_of_a_language_model_certificate(exec_cert: tuple[Path, int], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cert, k = exec_cert
    assert run("precision", cert, "--json", tmp_path / "p.json") == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "p.json").read_text())
    rows = {r["format"]: r for r in data["rows"]}
    assert list(rows) == ["float64", "float32", "bfloat16", "float16"]
    total = data["certified"]
    assert total == 64 and rows["float64"]["proved"] is None
    # the producer's float32 proof contains what the checker re-proved for the claim
    assert k <= rows["float32"]["proved"] <= total
    for fmt in ("float32", "bfloat16", "float16"):  # a proof holds in the run too
        assert rows[fmt]["proved"] <= rows[fmt]["torch_held"] <= total
    assert f"the certificate claims {k} positions for every float32 execution" in out
    assert run("precision", cert, "--ulps", "0") == 2
    assert "--ulps" in capsys.readouterr().err
    assert run("precision", cert, "--bits", "24") == 2
    assert "network certificates only" in capsys.readouterr().err
