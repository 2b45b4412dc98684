"""Code lengths for every float32 execution (``claims.execution.code_length_bits``,
docs/trained-models.md, "Execution claims") on a small random GPT-2 (1 layer, d 32) with
greedy continuations: at least the real-valued bounds, re-proved by the checker (reference
and fast paths alike), a lowered bound rejected, a malformed one unusable."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from lm_models import redigest  # noqa: E402

from exactmem.api.lm import certify_lm  # noqa: E402
from exactmem.checker.verify import check_certificate  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.lm.certfile import lm_info  # noqa: E402
from exactmem.lm.tokens import next_token_dataset  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402

Cert = dict[str, Any]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A certificate with real-valued and float32-execution code lengths, and the result."""
    import torch
    from transformers import GPT2LMHeadModel

    from exactmem.lm.checkpoints.random_models import random_gpt2

    folder = tmp_path_factory.mktemp("execcode")
    random_gpt2(folder / "m", seed=3, layers=1, std=0.02, bias_std=0.01)
    model = GPT2LMHeadModel.from_pretrained(folder / "m").double().eval()
    toks = np.random.default_rng(5).integers(0, 64, size=(4, 12))
    with torch.no_grad():  # greedy continuations: some positions hold
        for t in range(4, 12):
            toks[:, t] = model(torch.tensor(toks[:, :t])).logits[:, -1].argmax(-1).numpy()
    save_dataset(next_token_dataset(toks, 64), folder / "d.json")
    res = certify_lm(folder / "m", folder / "d.json", folder / "c.json", partial=True,
                     execution="float32")
    assert res.written
    return folder / "c.json", res


@pytest.fixture()
def cert(made: tuple[Path, Any]) -> Cert:
    return dict(json.loads(made[0].read_text()))


def test_execution_bounds_are_above_the_real_valued_ones_and_verified(
        made: tuple[Path, Any], cert: Cert) -> None:
    real = [Fraction(c) for c in cert["claims"]["code_length_bits"]]
    ex = [Fraction(c) for c in cert["claims"]["execution"]["code_length_bits"]]
    assert len(ex) == len(real) == 4
    assert all(e >= r for e, r in zip(ex, real, strict=True))
    assert sum(ex) > sum(real)  # the roundings of float32 cost something
    assert made[1].exec_code_lengths == ex
    report = check_certificate(copy.deepcopy(cert), made[0].parent)
    assert report.verified, report.failures
    assert report.claim is not None
    lines = report.claim.split("\nc claim: ")
    assert lines[-1].startswith("bits below the uniform code (not memorized bits")
    assert "under every float32 execution (the model above): at least " in lines[-1]
    info = lm_info(cert)
    assert info["execution_code_length_bits"] == pytest.approx(float(sum(ex)))
    assert info["execution_memorized_bits"] <= info["certified_memorized_bits"]


def test_info_json_reports_execution_memorized_bits(made: tuple[Path, Any], cert: Cert,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert main(["info", str(made[0]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    uniform = 11 * Fraction(6)  # 11 predicted tokens of 64 a sequence
    ex = [Fraction(c) for c in cert["claims"]["execution"]["code_length_bits"]]
    expected = sum(max(Fraction(0), uniform - c) for c in ex)
    assert abs(info["execution_memorized_bits"] - float(expected)) < 1e-9
    assert info["execution_memorized_bits"] < info["certified_memorized_bits"]


def test_reference_and_fast_paths_agree(made: tuple[Path, Any], cert: Cert) -> None:
    fast = check_certificate(copy.deepcopy(cert), made[0].parent)
    ref = check_certificate(copy.deepcopy(cert), made[0].parent, reference=True)
    assert fast.verified and ref.verified
    assert fast.claim == ref.claim


def lowered(cert: Cert, i: int, by: Fraction) -> Cert:
    c = copy.deepcopy(cert)
    rows = c["claims"]["execution"]["code_length_bits"]
    x = Fraction(rows[i]) - by
    rows[i] = f"{x.numerator}/{x.denominator}"
    return redigest(c)


def test_a_lowered_execution_bound_is_rejected(made: tuple[Path, Any], cert: Cert,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    real = Fraction(cert["claims"]["code_length_bits"][1])
    ex = Fraction(cert["claims"]["execution"]["code_length_bits"][1])
    # down to the real-valued bound: true of the real function, not of every execution
    c = lowered(cert, 1, ex - real)
    report = check_certificate(c, made[0].parent)
    assert report.verified is False and not report.unusable
    assert len(report.failures) == 1
    assert report.failures[0].startswith("execution float32: code length of sequence 1: "
                                         "claimed ")
    path = tmp_path / "low.json"
    path.write_text(json.dumps(lowered(cert, 2, Fraction(1, 1 << 20))))
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr()
    assert "s REJECTED" in out.out.splitlines()
    assert "execution float32: code length of sequence 2" in out.err


@pytest.mark.parametrize(("edit", "message"), [
    (lambda e: e["code_length_bits"].pop(), "claims.execution.code_length_bits: expected 4"),
    (lambda e: e["code_length_bits"].__setitem__(0, 1.5),
     "claims.execution.code_length_bits[0]"),
    (lambda e: e["code_length_bits"].__setitem__(3, "-2"),
     "claims.execution.code_length_bits[3]: a code length is >= 0"),
    (lambda e: e.__setitem__("code_length_bits", {}), "claims.execution.code_length_bits"),
])
def test_a_malformed_execution_bound_is_unusable(made: tuple[Path, Any], cert: Cert,
                                                 tmp_path: Path, edit: Any, message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    c = copy.deepcopy(cert)
    edit(c["claims"]["execution"])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(redigest(c)))
    assert main(["check", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_execution_bounds_need_the_real_valued_ones(made: tuple[Path, Any],
                                                    cert: Cert) -> None:
    c = copy.deepcopy(cert)
    del c["claims"]["code_length_bits"]
    report = check_certificate(redigest(c), made[0].parent)
    assert report.unusable
    assert any("claims.execution.code_length_bits: only with claims.code_length_bits" in f
               for f in report.failures)


def test_slices_add_up_to_the_claim_of_one_pass(made: tuple[Path, Any], cert: Cert) -> None:
    from exactmem.checker.lm import lm_verify

    whole: dict[str, Any] = {}
    parts: list[dict[str, Any]] = []
    assert not lm_verify.check(copy.deepcopy(cert), made[0].parent, totals=whole)[0]
    for k in range(3):
        parts.append({})
        assert not lm_verify.check(copy.deepcopy(cert), made[0].parent, shard=(k, 3),
                                   totals=parts[-1])[0]
    merged = lm_verify.merge(parts)
    assert merged["execution"]["below_uniform"] == whole["execution"]["below_uniform"]
    assert lm_verify.claim_text(merged) == lm_verify.claim_text(whole)
