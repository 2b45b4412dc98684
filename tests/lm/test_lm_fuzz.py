"""The language-model checker under fuzzing, at a small count (scripts/fuzz_lm_checker.py
runs 10^4): every answer a verdict, every accepted certificate true by the independent
mpmath reference (tests/lm_reference.py), the genuine bases verified, the crafted corpus
(near ties, degenerate heads, extreme scales, code lengths at the edge) judged the same
way.  The reference itself agrees with the producer's float64 forward pass."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from lm_crafted import self_labelled, small_spec
from lm_fuzzing import campaign, crafted, genuine, run_one, write
from lm_reference import logits, read

from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.float64 import logits64


@pytest.fixture(scope="module")
def bases() -> dict:
    return genuine()


@pytest.mark.parametrize("arch", [dict(norm_first=False), dict(norm="rmsnorm"),
                                  dict(final_norm=False)])
def test_the_reference_agrees_with_float64(arch: dict) -> None:
    spec = small_spec(layers=2, tied=True)
    if arch.get("final_norm") is False:
        arch = {**arch, "tensors": {k: v for k, v in spec.tensors.items()
                                    if not k.startswith("lnf")}}
    spec = replace(spec, **arch)
    ds = self_labelled(spec, 1)
    cert = build_lm_certificate(spec, ds, [[]], partial=True)
    ref = np.array([[float(x) for x in row] for row in logits(read(cert), list(ds.sequences[0]))])
    assert np.abs(ref - logits64(spec, np.array(ds.sequences))[0]).max() < 1e-12


def test_the_genuine_bases_are_verified(bases: dict, tmp_path: Path) -> None:
    for name, cert in bases.items():
        row = run_one(write(tmp_path / "b.json", cert), cert)
        assert row["verdict"] == "s VERIFIED" and not row["false"], name


def test_crafted_models_get_true_verdicts(tmp_path: Path) -> None:
    rows = [run_one(write(tmp_path / "c.json", c), c) for _, c in crafted(24, seed=7)]
    assert not [r for r in rows if r["false"] or r["verdict"] == "crash"]
    assert {r["verdict"] for r in rows} >= {"s VERIFIED"}


def test_mutations_get_verdicts_and_no_false_accepts(bases: dict, tmp_path: Path) -> None:
    rows = campaign(150, random.Random(3).randrange(1 << 30), tmp_path, bases)
    bad = [r for r in rows if r["false"] or r["verdict"] == "crash"]
    assert not bad, bad[:3]
    assert {r["verdict"] for r in rows} == {"s VERIFIED", "s REJECTED", "s UNUSABLE"}
