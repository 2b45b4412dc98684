"""The checker's fast path (exactmem/checker/lm/lm_limbs.py, docs/checker.md "Fast path"):
float64 BLAS on limbs gives exactly the Python-integer products, ``apply_all`` the same
integers as the standard-library path, and ``check`` the verdicts, counts and failing
positions of ``check --reference``; a limb bound that fails runs the integer product."""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exactmem.api import verbs
from exactmem.checker import check_certificate
from exactmem.checker.lm import lm_forward, lm_limbs, lm_model
from exactmem.cli import main as cli
from exactmem.lm.certfile import build_lm_certificate
from tests.lm_crafted import coded_certificate, redigest, self_labelled, small_spec, write

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _int(rnd: random.Random, bits: int) -> int:
    """A random integer of up to ``bits`` bits, either sign, often an edge value."""
    pick = rnd.random()
    if pick < 0.1:
        return 0
    if pick < 0.3:  # limb and sign edges: +-2**j, 2**j - 1, -2**j - 1
        j = rnd.randint(0, bits)
        return rnd.choice([1, -1]) * (1 << j) + rnd.choice([-1, 0, 1])
    return rnd.choice([1, -1]) * rnd.getrandbits(rnd.randint(1, bits))


@pytest.mark.parametrize("k", [1, 2, 3, 31, 32, 33, 255, 1000, 4096])
def test_matmul_exact_is_the_integer_product(k: int) -> None:
    rnd = random.Random(k)
    for _ in range(6 if k < 1000 else 2):
        n, m = rnd.randint(1, 5), rnd.randint(1, 5)
        ab, wb = rnd.choice([1, 7, 8, 24, 53, 64, 130, 1100]), rnd.choice([1, 16, 54, 300])
        rows = [[_int(rnd, ab) for _ in range(k)] for _ in range(n)]
        cols = [[_int(rnd, wb) for _ in range(k)] for _ in range(m)]
        assert lm_limbs.matmul_exact(rows, cols) == lm_limbs.reference_product(rows, cols)


def test_extreme_entries() -> None:
    k = 32  # three-byte limbs: k (2**24 - 1)**2 <= 2**53
    for x in (-(1 << 23), (1 << 24) - 1, -(1 << 1100), (1 << 1100) - 1, -1):
        rows, cols = [[x] * k, [-x] * k], [[x] * k, [1] * k]
        assert lm_limbs.matmul_exact(rows, cols) == lm_limbs.reference_product(rows, cols)


def test_limb_size_follows_the_inner_dimension() -> None:
    for nb in (3, 2, 1):
        kmax = (1 << 53) // ((1 << 8 * nb) - 1) ** 2  # the largest k with k u**2 <= 2**53
        assert lm_limbs.limb_bytes(kmax) == nb and lm_limbs.limb_bytes(kmax + 1) == nb - 1
    assert [lm_limbs.limb_bytes(k) for k in (1, 32, 33, 1 << 21)] == [3, 3, 2, 2]
    assert lm_limbs._blas_ok(2, 1 << 26, 1 << 26) and not lm_limbs._blas_ok(2, (1 << 26) + 1,
                                                                            1 << 26)


def test_a_failed_bound_runs_the_integer_product(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(7)
    rows = [[_int(rnd, 90) for _ in range(40)] for _ in range(3)]
    cols = [[_int(rnd, 30) for _ in range(40)] for _ in range(4)]
    w = lm_limbs.weights(cols)
    assert w is not None and lm_limbs.product(rows, w) is not None
    lin = lm_forward.linear(([list(r) for r in zip(*cols, strict=True)], 9), ([[5, -3, 0, 7]], 4))
    fast = lm_limbs.prepare(lin)  # limbs made while the bound held
    assert isinstance(fast, lm_limbs.Linear)
    monkeypatch.setattr(lm_limbs, "EXACT", 1 << 20)  # no limb pair passes now
    assert lm_limbs.product(rows, w) is None and lm_limbs.weights(cols) is None
    assert lm_limbs.matmul_exact(rows, cols) == lm_limbs.reference_product(rows, cols)
    assert not isinstance(lm_limbs.prepare(lin), lm_limbs.Linear)
    assert lm_forward.apply_all(fast, rows, [1, 2, 3]) == \
        lm_forward.apply_all(tuple(lin), rows, [1, 2, 3])


@pytest.mark.parametrize("radius_bits", [0, 20, 150])
def test_apply_all_gives_the_same_integers(radius_bits: int) -> None:
    rnd = random.Random(radius_bits)
    k, m, n = 48, 24, 9
    for e, eb in ((40, 35), (3, 60)):  # g <= e and g > e
        rows = [[_int(rnd, 30) for _ in range(m)] for _ in range(k)]
        lin = lm_forward.linear((rows, e), ([[_int(rnd, 30) for _ in range(m)]], eb))
        ms = [[_int(rnd, 140) for _ in range(k)] for _ in range(n)]
        rs = [rnd.getrandbits(radius_bits) if radius_bits else 0 for _ in range(n)]
        assert lm_forward.apply_all(lm_limbs.prepare(lin), ms, rs) == \
            lm_forward.apply_all(lin, ms, rs)


def _certificates() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for act, tied, layers in (("gelu_tanh", False, 2), ("gelu_erf", True, 1), ("relu", False, 1)):
        spec = small_spec(seed=len(act) + layers, v=9, t=6, d=8, heads=2, layers=layers,
                          d_ff=16, tied=tied, act=act)
        ds = self_labelled(spec, 4)
        cert = build_lm_certificate(spec, ds, [list(range(6))] * 4, partial=True)
        out.append((act, cert))
    spec = small_spec(seed=3, v=9, t=6, d=8, heads=2, layers=1, d_ff=16)
    out.append(("code lengths", coded_certificate(spec, self_labelled(spec, 3), 1)))
    bad = copy.deepcopy(out[0][1])  # a label changed: that position fails
    labels = bad["dataset"]["data"]["labels"]
    labels[1][2] = (labels[1][2] + 1) % 9
    out.append(("changed label", redigest(bad, rehash_dataset=True)))
    return out


@pytest.mark.parametrize("name,cert", _certificates())
def test_check_and_reference_agree(name: str, cert: dict[str, Any]) -> None:
    fast, ref = check_certificate(cert), check_certificate(cert, reference=True)
    assert (fast.verdict, fast.claim, fast.totals) == (ref.verdict, ref.claim, ref.totals)
    # the same failures; a margin bound differs, as GELU's fast ball is wider (lm_fastgelu)
    assert [f.split("; margin")[0] for f in fast.failures] == \
        [f.split("; margin")[0] for f in ref.failures]
    if name == "changed label":
        assert not fast.verified and len(fast.failures) == 1


def test_reference_prepares_no_limbs_and_numpy_is_optional(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, cert = _certificates()[0]
    assert isinstance(lm_model.model(cert["model"])["head"], lm_limbs.Linear)
    assert not isinstance(lm_model.model(cert["model"], fast=False)["head"], lm_limbs.Linear)
    want = check_certificate(cert, reference=True)
    monkeypatch.setattr(lm_limbs, "np", None)  # as without NumPy: the stdlib path runs
    assert not lm_limbs.available()
    assert not isinstance(lm_model.model(cert["model"])["head"], lm_limbs.Linear)
    got = check_certificate(cert)
    assert (got.verdict, got.claim, got.totals) == (want.verdict, want.claim, want.totals)


def test_cli_reference_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, cert = _certificates()[0]
    path = write(tmp_path / "c.json", cert)
    outs = []
    for extra in ([], ["--reference"], ["--reference", "--shards", "2"]):
        assert cli(["check", str(path), "-q", *extra]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] == outs[2] and "s VERIFIED" in outs[0]
    assert verbs.check(path, reference=True).claim == verbs.check(path).claim


@pytest.mark.slow
def test_a_committed_capacity_certificate(tmp_path: Path) -> None:
    name = "capacity_gpt2_d28L2_V64_S16_N128_s1500_seed0.json.gz"
    cert = json.loads(gzip.decompress((RESULTS / name).read_bytes()))
    cert["claims"]["positions"] = cert["claims"]["positions"][:2] + [
        [] for _ in cert["claims"]["positions"][2:]]
    del cert["claims"]["code_length_bits"]
    cert = redigest(cert)
    fast, ref = check_certificate(cert), check_certificate(cert, reference=True)
    assert (fast.verdict, fast.failures, fast.claim) == (ref.verdict, ref.failures, ref.claim)


def test_planes_are_float64_integers() -> None:
    w = lm_limbs.weights([[3, -5, 1 << 40], [0, 7, -(1 << 40)]])
    assert w is not None and w.planes.dtype == np.float64
    assert np.array_equal(w.planes, np.round(w.planes)) and w.umax < 1 << 24
