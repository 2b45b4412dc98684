"""Memorized bits that say what they are (docs/memorized-bits.md), on the 79-parameter case:
a GPT-2 with ``n_embd = 2``, one layer, one head, ``n_inner = 1``, vocabulary 2 and context
16 (79 stored numbers, the head tied) whose weights code alternation, on a dataset of
duplicated and structured sequences.  Its code-length claim is bits below the uniform code,
never "memorized"; on data the checker regenerates from a seed it is memorized bits; with a
reference model the checker states Morris et al.'s mem_U, equal to an independent float64
computation (torch, float64 log-softmax of both models) to 1e-6 relative, the rigorous
bounds on both sides of it."""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_crafted import redigest

from exactmem.checker.lm import lm_verify
from exactmem.checker.verify import check_certificate
from exactmem.cli import main
from exactmem.lm.tokens import next_token_dataset
from exactmem.model.dataset import save_dataset

pytest.importorskip("transformers")
import torch  # noqa: E402

Cert = dict[str, Any]
ALT = [k % 2 for k in range(17)]
ROWS = [ALT] * 40 + [[1 - t for t in ALT], [(k // 2) % 2 for k in range(17)],
                     [0] * 17, *np.random.default_rng(0).integers(0, 2, (3, 17)).tolist()]


def gpt2_79(path: Path, seed: int, gain: float) -> Path:
    """The 79-parameter GPT-2.  ``gain`` > 0: the token table ``(1, -1), (-1, 1)``, small
    random positions, attention and MLP (they do not flip the sign the two-dimensional
    LayerNorm reads), and a final LayerNorm gain of ``-gain``, so the tied head puts the
    logit ``2 gain`` on the other token: the model codes alternation.  (A LayerNorm of a
    2-vector returns its sign: its gradient is zero, so this width does not train by
    gradient descent; the weights are set.)  ``gain`` 0: every weight small and random, a
    reference that knows nothing."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    cfg = GPT2Config(vocab_size=2, n_positions=16, n_embd=2, n_layer=1, n_head=1, n_inner=1,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        if gain:
            model.transformer.wte.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))
            model.transformer.ln_f.weight.fill_(-gain)
            model.transformer.ln_f.bias.zero_()
    assert sum(p.numel() for p in model.parameters()) == 79
    model.save_pretrained(str(path))
    return path


def float64_code_lengths(path: Path, rows: list[list[int]]) -> list[float]:
    """Independent of exactmem: transformers' forward pass in float64, log-softmax, the
    code length ``-sum_t log2 p(t_{k+1} | t_0..t_k)`` of every row."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(path)).double().eval()
    x = torch.tensor(rows)
    with torch.no_grad():
        logp = torch.log_softmax(model(x[:, :-1]).logits, dim=-1)
    nats = -logp.gather(-1, x[:, 1:, None])[..., 0].sum(-1)
    return (nats / math.log(2)).tolist()


def distinct(rows: list[list[int]]) -> list[int]:
    first: dict[tuple[int, ...], int] = {}
    for i, r in enumerate(rows):
        first.setdefault(tuple(r), i)
    return sorted(first.values())


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("memu")
    gpt2_79(tmp / "m", 1, gain=12.0)
    gpt2_79(tmp / "ref", 2, gain=0.0)
    save_dataset(next_token_dataset(np.array(ROWS), 2), tmp / "d.json")
    return {"tmp": tmp}


def claim_lines(capsys: pytest.CaptureFixture[str], cert: Path) -> list[str]:
    capsys.readouterr()
    assert main(["check", str(cert)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("s VERIFIED"), out
    return [ln for ln in out.splitlines() if ln.startswith("c claim: ")]


def test_structured_data_gives_bits_below_the_uniform_code_not_memorized_bits(
        case: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    tmp = case["tmp"]
    assert main(["certify-model", str(tmp / "m"), str(tmp / "d.json"), "-o",
                 str(tmp / "plain.json"), "--partial", "-q"]) == 0
    lines = claim_lines(capsys, tmp / "plain.json")
    assert len(lines) == 2
    bits = lines[1]
    assert "for the 7 distinct sequences of the dataset (39 repeated sequences counted once)" \
        in bits
    assert "bits below the uniform code" in bits and "not memorized bits" in bits
    assert "memorized bits (Morris" not in bits and "regenerated from seed" not in bits
    # the two alternating rows are coded in almost nothing: about 2 x 16 bits below uniform
    low = int(bits.split("summed as Morris et al. 2025: at least ")[1].split()[0])
    assert 31 <= low <= 32


def test_seeded_uniform_data_gives_memorized_bits(case: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.datasets.uniform_tokens import uniform_dataset

    tmp = case["tmp"]
    save_dataset(uniform_dataset(2026, 2, 6, 17), tmp / "u.json")
    assert main(["certify-model", str(tmp / "m"), str(tmp / "u.json"), "-o",
                 str(tmp / "u_cert.json"), "--partial", "-q"]) == 0
    bits = claim_lines(capsys, tmp / "u_cert.json")[1]
    assert ("memorized bits (Morris et al. 2025, the data is uniform random: regenerated "
            "from seed 2026 by exactmem.uniform-tokens/1): at least ") in bits
    assert "not memorized bits" not in bits
    cert = json.loads((tmp / "u_cert.json").read_text())
    case["uniform_cert"] = cert
    assert cert["dataset"]["data"]["generator"]["seed"] == 2026
    # bound by path instead of embedded: the checker reads the generator from the file
    assert main(["certify-model", str(tmp / "m"), str(tmp / "u.json"), "-o",
                 str(tmp / "u_bound.json"), "--partial", "--bind-dataset", "-q"]) == 0
    assert "regenerated from seed 2026" in claim_lines(capsys, tmp / "u_bound.json")[1]


def _rehashed(cert: Cert) -> Cert:
    return redigest(cert, rehash_dataset=True)


def _seeded_cert(case: dict[str, Any]) -> Cert:
    """The seeded certificate (made here when its test ran elsewhere or not at all)."""
    if "uniform_cert" not in case:
        from exactmem.datasets.uniform_tokens import uniform_dataset

        tmp = case["tmp"]
        save_dataset(uniform_dataset(2026, 2, 6, 17), tmp / "u2.json")
        assert main(["certify-model", str(tmp / "m"), str(tmp / "u2.json"), "-o",
                     str(tmp / "u2_cert.json"), "--partial", "-q"]) == 0
        case["uniform_cert"] = json.loads((tmp / "u2_cert.json").read_text())
    return case["uniform_cert"]


def test_a_generator_the_data_does_not_match_is_rejected(case: dict[str, Any]) -> None:
    base = _seeded_cert(case)
    c = copy.deepcopy(base)
    data = c["dataset"]["data"]
    t = data["sequences"][2][5]
    data["sequences"][2][5] = 1 - t  # token 5 of row 2, and the label of position 4
    data["labels"][2][4] = 1 - t
    report = check_certificate(_rehashed(c), Path("."))
    assert report.verified is False and not report.unusable
    assert any("dataset.generator: the data is not what exactmem.uniform-tokens/1 draws "
               "from seed 2026 (1 of 6 sequences differ; first: sequence 2, token 5" in f
               for f in report.failures), report.failures
    c = copy.deepcopy(base)
    c["dataset"]["data"]["generator"]["seed"] = 2027
    report = check_certificate(_rehashed(c), Path("."))
    assert report.verified is False and not report.unusable
    c = copy.deepcopy(base)
    c["dataset"]["data"]["generator"]["vocab"] = 3
    assert check_certificate(_rehashed(c), Path(".")).verified is False
    for key, value, message in (("name", "exactmem.uniform-tokens/2", "generator.name"),
                                ("seed", 1 << 64, "generator.seed"),
                                ("seed", True, "generator.seed"),
                                ("extra", 1, "generator")):
        c = copy.deepcopy(base)
        c["dataset"]["data"]["generator"][key] = value
        report = check_certificate(_rehashed(c), Path("."))
        assert report.unusable and any(message in f for f in report.failures), report.failures
    c = copy.deepcopy(base)
    del c["dataset"]["data"]["generator"]  # no generator: the old wording, still verified
    report = check_certificate(_rehashed(c), Path("."))
    assert report.verified and report.claim is not None and "not memorized bits" in report.claim


@pytest.fixture(scope="module")
def with_reference(case: dict[str, Any]) -> dict[str, Any]:
    tmp = case["tmp"]
    assert main(["certify-model", str(tmp / "m"), str(tmp / "d.json"), "-o",
                 str(tmp / "ref_cert.json"), "--partial", "--reference", str(tmp / "ref"),
                 "-q"]) == 0
    return json.loads((tmp / "ref_cert.json").read_text())


def test_mem_u_against_a_reference_equals_an_independent_float64_computation(
        case: dict[str, Any], with_reference: Cert, capsys: pytest.CaptureFixture[str]) -> None:
    tmp = case["tmp"]
    lines = claim_lines(capsys, tmp / "ref_cert.json")
    assert len(lines) == 3
    assert lines[2].startswith("c claim: mem_U at least ")
    assert "over 7 distinct sequences (39 repeated sequences counted once) (Morris et al. " \
        "2025, reference model sha256:" in lines[2] and "79 parameters" in lines[2]
    totals: dict[str, Any] = {}
    bad, unusable, _ = lm_verify.check(copy.deepcopy(with_reference), tmp, totals=totals)
    assert not bad and not unusable
    certified = totals["mem_u"][0]
    assert f"mem_U at least {certified.numerator // certified.denominator} bits" in lines[2]
    model = float64_code_lengths(tmp / "m", ROWS)
    ref = float64_code_lengths(tmp / "ref", ROWS)
    once = distinct(ROWS)
    exact = sum(max(0.0, ref[i] - min(ref[i], model[i])) for i in once)
    assert 0 <= exact - float(certified) <= 1e-6 * exact
    assert exact > 30  # the two alternating rows: about 16 bits each
    # both sides, per sequence: lower <= float64 <= upper, each bound within 1e-6 relative
    lower = [Fraction(x) for x in with_reference["reference"]["code_length_lower_bits"]]
    upper = [Fraction(x) for x in with_reference["reference"]["code_length_bits"]]
    own = [Fraction(x) for x in with_reference["claims"]["code_length_bits"]]
    for i in range(len(ROWS)):
        assert float(lower[i]) <= ref[i] <= float(upper[i])
        assert model[i] <= float(own[i])
        assert float(upper[i] - lower[i]) <= 1e-6 * max(1.0, ref[i])
        assert float(own[i]) - model[i] <= 1e-6 * max(1.0, model[i])
    case["figures"] = (exact, float(certified))


def test_mem_u_shards_combine_into_the_one_pass_claim(case: dict[str, Any],
                                                      with_reference: Cert) -> None:
    from exactmem.checker.sharded import combine

    one = check_certificate(copy.deepcopy(with_reference), case["tmp"])
    shards = combine([check_certificate(copy.deepcopy(with_reference), case["tmp"], None,
                                        (k, 3)) for k in range(3)])
    assert one.verified and shards.claim == one.claim


def _edit(cert: Cert, key: str, i: int, delta: Fraction) -> Cert:
    c = copy.deepcopy(cert)
    x = Fraction(c["reference"][key][i]) + delta
    c["reference"][key][i] = f"{x.numerator}/{x.denominator}" if x.denominator > 1 \
        else str(x.numerator)
    return redigest(c)


def test_a_reference_bound_the_checker_cannot_prove_is_rejected(case: dict[str, Any],
                                                                with_reference: Cert) -> None:
    tmp, step = case["tmp"], Fraction(1, 1 << 20)
    report = check_certificate(_edit(with_reference, "code_length_lower_bits", 0, step), tmp)
    assert report.verified is False and not report.unusable
    assert any("sequence 0: reference model: claimed code length lower bound" in f
               for f in report.failures), report.failures
    report = check_certificate(_edit(with_reference, "code_length_bits", 3, -step), tmp)
    assert report.verified is False
    assert any("sequence 3: reference model: claimed code length" in f
               for f in report.failures), report.failures
    looser = _edit(_edit(with_reference, "code_length_lower_bits", 0, -step),
                   "code_length_bits", 0, step)
    assert check_certificate(looser, tmp).verified  # weaker claims still hold


def test_a_changed_reference_weight_is_rejected(case: dict[str, Any],
                                                with_reference: Cert) -> None:
    tmp = case["tmp"]
    c = copy.deepcopy(with_reference)
    vals = c["reference"]["model"]["tensors"]["wte"]["values"]
    vals[0] = str(-int(vals[0]) or 1)
    stale = check_certificate(copy.deepcopy(c), tmp)
    assert stale.verified is False and any("digest" in f for f in stale.failures)
    report = check_certificate(redigest(c), tmp)
    assert report.verified is False and not report.unusable
    assert any("reference model: claimed code length" in f for f in report.failures)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c["claims"].pop("code_length_bits"), "mem_U needs the model's code lengths"),
    (lambda c: c["reference"]["model"].__setitem__("vocab_size", 3),
     "reference.model.vocab_size"),
    (lambda c: c["reference"]["code_length_bits"].pop(), "reference.code_length_bits"),
    (lambda c: c["reference"]["code_length_lower_bits"].__setitem__(0, "-1"),
     "a code length is >= 0"),
    (lambda c: c["reference"].__setitem__("extra", 1), "reference"),
    (lambda c: c["reference"]["model"]["tensors"].pop("wpe"), "wpe"),
])
def test_a_malformed_reference_is_unusable(case: dict[str, Any], with_reference: Cert,
                                           edit: Any, message: str) -> None:
    c = copy.deepcopy(with_reference)
    edit(c)
    report = check_certificate(redigest(c), case["tmp"])
    assert report.unusable, report.failures
    assert any(message in f for f in report.failures), report.failures


def test_a_reference_needs_next_token_labels(case: dict[str, Any],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.model.dataset import Dataset

    tmp = case["tmp"]
    rows = np.array(ROWS[40:])
    save_dataset(Dataset(task="seq2seq", inputs="token-ids", vocab_size=2,
                         sequences=tuple(tuple(map(int, r[:-1])) for r in rows),
                         labels=tuple((0,) * 16 for _ in rows)), tmp / "zeros.json")
    capsys.readouterr()
    assert main(["certify-model", str(tmp / "m"), str(tmp / "zeros.json"), "-o",
                 str(tmp / "z.json"), "--partial", "--reference", str(tmp / "ref"),
                 "-q"]) == 2
    assert "--reference: mem_U needs a dataset labelled with its next tokens" in \
        capsys.readouterr().err
    assert not (tmp / "z.json").exists()
