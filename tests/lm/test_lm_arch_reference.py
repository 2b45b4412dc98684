"""The GPT-NeoX / LLaMA options against the independent mpmath judge (tests/lm_reference.py):
the judge's logits agree with the producer's float64 forward pass, genuine certificates with
the options are judged true, and mutations of them get verdicts with no false accept."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_arch import arch_spec, certificate, self_labelled
from lm_fuzzing import campaign, run_one, write
from lm_models import redigest
from lm_reference import logits, read

from exactmem.checker.lm import lm_verify
from exactmem.lm.float64 import logits64

SMALL = dict(vocab=7, context=5, d=8, heads=2, d_ff=8)
OPTIONS: dict[str, dict[str, Any]] = {
    "llama": dict(rotary_dims=2, kv_heads=1, gated_mlp=True, activation="silu",
                  norm="rmsnorm", biases=False),
    "neox": dict(rotary_dims=4, parallel_residual=True, activation="gelu_erf"),
    "scores": dict(score_scale=False, inverse_layer_scale=True, kv_heads=1),
}


def _cert(name: str) -> dict[str, Any]:
    spec = arch_spec(11, **SMALL, **OPTIONS[name])
    cert = certificate(spec, self_labelled(spec, 2, seed=4))
    lost: list[tuple[int, int]] = []
    lm_verify.check(cert, Path("."), unproved=lost)
    cert["claims"]["positions"] = [[p for p in row if (i, p) not in lost]
                                   for i, row in enumerate(cert["claims"]["positions"])]
    return redigest(cert)


@pytest.fixture(scope="module")
def bases() -> dict[str, dict[str, Any]]:
    return {name: _cert(name) for name in OPTIONS}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_the_reference_agrees_with_float64(name: str) -> None:
    spec = arch_spec(11, **SMALL, **OPTIONS[name])
    ds = self_labelled(spec, 1)
    cert = certificate(spec, ds)
    ref = np.array([[float(x) for x in row] for row in logits(read(cert), list(ds.sequences[0]))])
    assert np.abs(ref - logits64(spec, np.array(ds.sequences))[0]).max() < 1e-12


def test_the_genuine_certificates_are_judged_true(bases: dict[str, Any], tmp_path: Path) -> None:
    for name, cert in bases.items():
        assert sum(map(len, cert["claims"]["positions"])) >= 8, name
        row = run_one(write(tmp_path / "b.json", cert), cert)
        assert row["verdict"] == "s VERIFIED" and not row["false"], name


def test_mutations_get_verdicts_and_no_false_accepts(bases: dict[str, Any],
                                                     tmp_path: Path) -> None:
    rows = campaign(45, random.Random(5).randrange(1 << 30), tmp_path, bases)
    bad = [r for r in rows if r["false"] or r["verdict"] == "crash"]
    assert not bad, bad[:3]
    assert {r["verdict"] for r in rows} >= {"s VERIFIED", "s REJECTED", "s UNUSABLE"}
