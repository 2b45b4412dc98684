"""The language-model checker's limits: every crafted file is answered with bounded work
(a code length of a label far below a rival in the log domain, the working precision capped,
the forward work estimated before any tensor is read, gzip inflation bounded, nothing
evaluated once the digest fails), booleans are not integers, numbers too long to print are
printed as bit lengths, and repeated sequences count once in a code-length claim, which
never says "memorized"."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_crafted import (
    coded_certificate,
    next_token_dataset,
    redigest,
    scaled,
    small_spec,
    write,
    zero_bomb,
)

from exactmem.checker.lm import lm_bounds, lm_codelength, lm_forward, lm_model, lm_verify
from exactmem.checker.sharded import combine
from exactmem.checker.verify import check_certificate, check_file
from exactmem.cli import main

Cert = dict[str, Any]
P = lm_codelength.P
mpmath.mp.prec = 400


@pytest.fixture(scope="module")
def coded() -> Cert:
    spec = small_spec()
    return coded_certificate(spec, next_token_dataset(spec, 3), 1000)


@pytest.fixture
def exponents(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The arguments of every ``e**x`` with ``x >= 0`` the checker evaluates."""
    seen: list[int] = []
    inner = lm_bounds._exp_nonneg

    def recording(u: int, f: int) -> tuple[int, int]:
        seen.append(u >> f)
        return inner(u, f)

    monkeypatch.setattr(lm_bounds, "_exp_nonneg", recording)
    return seen


@pytest.mark.parametrize("bits", [20, 40, 400])
def test_a_huge_head_is_decided_in_the_log_domain(coded: Cert, exponents: list[int],
                                                  bits: int) -> None:
    """Finding: a head of +-2**40 asked for e**(2**41) at every class of every position."""
    cert = scaled(coded, "head", bits)
    report = check_certificate(copy.deepcopy(cert), Path("."))
    assert report.exit_code == 1 and "claimed code length 1000/1 bits is below" in \
        report.failures[0]
    assert max(exponents) <= lm_codelength.EXP_LIMIT
    big = copy.deepcopy(cert)  # a claim large enough holds, and the claim line says so
    big["claims"]["code_length_bits"] = ["1" + "0" * (bits // 3 + 50)] * 3
    report = check_certificate(redigest(big), Path("."))
    assert report.verified and report.claim is not None and "code length at most" in report.claim
    assert max(exponents) <= lm_codelength.EXP_LIMIT


def test_nothing_is_evaluated_when_the_digest_fails(coded: Cert, exponents: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cert = scaled(coded, "head", 40)
    cert["digest"] = coded["digest"]
    monkeypatch.setattr(lm_verify, "prepared", None)  # no forward pass runs
    monkeypatch.setattr(lm_verify.lm_forward, "logits", None)
    report = check_certificate(cert, Path("."))
    assert report.exit_code == 1 and "digest" in report.failures[0]
    assert "not evaluated" in report.failures[-1] and not exponents


@given(st.lists(st.integers(-(1 << 180), 1 << 180), min_size=1, max_size=6),
       st.integers(0, 1 << 140), st.data())
@settings(max_examples=120, deadline=None)
def test_the_position_bound_holds_in_both_domains(mids: list[int], rad: int,
                                                  data: st.DataObject) -> None:
    """Against mpmath at 400 bits, for exponents far beyond EXP_LIMIT too (2**52)."""
    y = data.draw(st.integers(0, len(mids) - 1))
    f = 128
    upper = lm_codelength.position_upper(mids, rad, y, f)
    top = mids[y] - 2 * rad  # the bound's worst point: every other logit at its highest
    worst = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(m + (2 * rad if k != y else 0)
                                                         - top - 2 * rad) / 2 ** f)
                                   for k, m in enumerate(mids)), 2) * 2 ** P
    assert worst <= upper
    assert upper - worst <= 2 ** P * 4 * rad / 2 ** f + 2 ** P * 1e-12 * (1 + worst / 2 ** P) \
        + 16 * len(mids) + 64


@pytest.mark.parametrize("bits", [20000, 60000])
def test_a_weight_beyond_every_float_is_refused_as_it_is_read(coded: Cert, bits: int) -> None:
    """Finding: a final-norm gain of 2**60000 set F = 60,064 and ran for minutes."""
    report = check_certificate(scaled(coded, "lnf.weight", bits), Path("."))
    assert report.unusable and "MAX_VALUE_BITS" in report.failures[0]


def test_a_huge_norm_gain_within_float64_is_checked_at_max_f(coded: Cert) -> None:
    report = check_certificate(scaled(coded, "lnf.weight", 1000), Path("."))
    assert report.exit_code in (0, 1) and report.totals is not None
    assert report.totals["f"] == lm_model.MAX_F


@given(st.integers(-(1 << 60), 1 << 60), st.integers(0, 40), st.integers(0, 1 << 20))
@settings(max_examples=150, deadline=None)
def test_gelu_of_a_huge_value_encloses_the_function(x: int, shift: int, r: int) -> None:
    """The clamped cube of the tanh form (values beyond 2**16) against mpmath."""
    f = 128
    m = x << (f - 20 + shift)  # up to 2**(40 + 40) in value
    mids, rad = lm_forward.gelu("gelu_tanh", [m], r, lm_forward.constants(2, f), f)

    def gelu(v: Any) -> Any:
        return v / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi)
                                        * (v + mpmath.mpf(44715) / 10 ** 6 * v ** 3)))
    for point in (m - r, m, m + r):
        y = gelu(mpmath.mpf(point) / 2 ** f) * 2 ** f
        assert mids[0] - rad <= y <= mids[0] + rad


def test_a_gzip_file_that_inflates_to_a_large_model_is_refused_while_reading(
        tmp_path: Path) -> None:
    """Finding: 25 KB inflating to a zero-filled d = 1,024 model and 20,000 sequences."""
    path = zero_bomb(tmp_path / "bomb.json.gz")
    assert path.stat().st_size < 64_000
    report = check_file(path)
    assert report.unusable and "MAX_INFLATION" in report.failures[0]


def test_the_forward_work_is_refused_from_the_shapes_before_the_tensors(coded: Cert) -> None:
    cert = copy.deepcopy(coded)
    m = cert["model"]
    m.update(d_model=1 << 16, d_ff=1 << 16, heads=1, layers=1 << 16)
    m["tensors"] = "never read"
    report = check_certificate(redigest(cert), Path("."))
    assert report.unusable and "MAX_WORK" in report.failures[0]


def test_a_twenty_thousand_digit_code_length_gets_a_verdict_and_its_s_line(
        coded: Cert, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding: a 20,000-digit numerator ended in Python's int-to-str limit."""
    for claim, code in (("9" * 20000, 0), ("1/" + "9" * 20000, 1)):
        cert = copy.deepcopy(coded)
        cert["claims"]["code_length_bits"] = [claim] * 3
        path = write(tmp_path / "c.json", redigest(cert))
        assert main(["check", str(path), "-q"]) == code
        out = capsys.readouterr()
        assert out.out.splitlines()[-1] == ("s VERIFIED", "s REJECTED")[code]
        assert "bits>" in out.out + out.err  # the long number as its bit length


@pytest.mark.parametrize(("where", "value"), [
    (("model", "tensors", "wpe", "shape"), [True, 4]),
    (("model", "tensors", "wte", "shape"), [7, 4.0]),
    (("model", "tensors", "wte", "scale"), True),
    (("model", "vocab_size"), True),
    (("dataset", "data", "sequences", 0, 0), True),
    (("model", "vocab_size"), (1 << 16) + 1),  # MAX_DIM
    (("model", "tensors", "wte", "scale"), 1101),  # MAX_SCALE
])
def test_a_boolean_float_or_out_of_range_integer_is_refused(where: tuple[Any, ...],
                                                            value: Any) -> None:
    """Finding: "shape": [true, 2] was read as [1, 2] (two digests for one model)."""
    spec = small_spec(t=1)
    cert = coded_certificate(spec, next_token_dataset(spec, 2))
    target = cert
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    report = check_certificate(redigest(json.loads(json.dumps(cert)), rehash_dataset=True),
                               Path("."))
    assert report.unusable, report.failures


def test_repeated_sequences_count_once_and_nothing_is_called_memorized() -> None:
    """Finding: one alternating sequence repeated was claimed as thousands of memorized
    bits."""
    spec = small_spec(v=2, t=16)
    row = [k % 2 for k in range(17)]
    ds = next_token_dataset(spec, 0, sequences=[row] * 40 + [[1 - t for t in row]])
    probe = coded_certificate(spec, ds, 10 ** 6)
    derived: dict[int, int] = {}
    lm_verify.check(copy.deepcopy(probe), Path("."), derived=derived)
    cert = copy.deepcopy(probe)
    cert["claims"]["code_length_bits"] = [
        str(-(-derived[i] // (1 << P))) for i in range(len(ds.sequences))]
    cert = redigest(cert)
    report = check_certificate(copy.deepcopy(cert), Path("."))
    assert report.verified and report.claim is not None
    line = report.claim.split("\nc claim: ")[1]
    assert "for the 2 distinct sequences of the dataset (39 repeated sequences counted once)" \
        in line
    assert "memorized by" not in line and "not memorized bits" in line
    code = sum(Fraction(c) for c in cert["claims"]["code_length_bits"][-2:])
    assert f"code length at most {-(-code.numerator // code.denominator)} bits" in line
    shards = combine([check_certificate(copy.deepcopy(cert), Path("."), None, (k, 3))
                      for k in range(3)])
    assert shards.claim == report.claim
