"""Execution claims (docs/trained-models.md, "Execution claims"): positions certified for
every float32 / bfloat16 execution.  An order-adversarial model (in the spirit of Szász,
Bánhelyi and Jelasity 2025: a near tie in the head that float32 rounding decides, so that
the argmax depends on the summation order torch runs) and a bfloat16-adversarial one; every
claimed position keeps its label under every order and format tried; tampering."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from exec_models import certify, near_tie_spec, runs, self_labelled  # noqa: E402
from lm_models import redigest  # noqa: E402

from exactmem.checker.lm.lm_verify import check  # noqa: E402


def _claims(cert: dict[str, Any]) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    real = {(i, p) for i, row in enumerate(cert["claims"]["positions"]) for p in row}
    ex = {(i, p) for i, row in enumerate(cert["claims"]["execution"]["positions"])
          for p in row}
    return real, ex


@pytest.fixture(scope="module")
def order_case() -> tuple[Any, Any, dict[str, Any]]:
    spec = near_tie_spec(1e-6)
    ds = self_labelled(spec, 40)
    return spec, ds, certify(spec, ds, "float32")


def test_order_adversarial_float32(order_case: tuple[Any, Any, dict[str, Any]]) -> None:
    spec, ds, cert = order_case
    bad, unusable, claim = check(cert, ".")
    assert not bad and not unusable, bad[:3]
    assert claim is not None and "in every float32 execution" in claim
    real, ex = _claims(cert)
    toks, ys = np.array(ds.sequences), np.array(ds.labels)
    got = {name: run(toks).argmax(-1) for name, run in runs(spec, "float32").items()}
    base = got["matmul"]
    differ = {(int(i), int(p)) for i, p in np.argwhere(
        np.any([g != base for g in got.values()], axis=0))}
    # at least one position certified for the real-valued function whose float32 argmax
    # differs between two orders torch runs; the execution claim excludes every such one
    assert differ & real, "the model has no order-dependent certified position"
    assert not differ & ex
    assert len(ex) >= 0.6 * len(real)
    for name, g in got.items():  # every claimed position keeps its label in every run
        assert all(g[i, p] == ys[i, p] for i, p in ex), name


@pytest.fixture(scope="module")
def bf16_case() -> tuple[Any, Any, dict[str, Any]]:
    spec = near_tie_spec(1e-3)
    ds = self_labelled(spec, 40)
    return spec, ds, certify(spec, ds, "bfloat16")


def test_bfloat16_claim(bf16_case: tuple[Any, Any, dict[str, Any]]) -> None:
    spec, ds, cert = bf16_case
    bad, unusable, claim = check(cert, ".")
    assert not bad and not unusable, bad[:3]
    assert claim is not None and "in every bfloat16 execution" in claim
    _, ex = _claims(cert)
    assert ex
    toks, ys = np.array(ds.sequences), np.array(ds.labels)
    f32 = {n: r(toks).argmax(-1) for n, r in runs(spec, "float32").items()}
    bf = {n: r(toks).argmax(-1) for n, r in runs(spec, "bfloat16").items()}
    right32 = np.all([g == ys for g in f32.values()], axis=0)
    flipped = {(int(i), int(p)) for i, p in np.argwhere(
        right32 & np.any([g != ys for g in bf.values()], axis=0))}
    assert flipped, "bfloat16 rounding flips no float32-right position"
    assert not flipped & ex
    for name, g in bf.items():  # with and without flush-to-zero, model and autocast
        assert all(g[i, p] == ys[i, p] for i, p in ex), name


def _rejected(cert: dict[str, Any]) -> list[str]:
    bad, unusable, _ = check(redigest(cert), ".")
    assert bad and not unusable
    return bad


def test_tampering(order_case: tuple[Any, Any, dict[str, Any]]) -> None:
    _, _, cert = order_case
    real, ex = _claims(cert)
    unprovable = sorted(real - ex)[0]
    edited = copy.deepcopy(cert)
    edited["claims"]["execution"]["positions"][unprovable[0]].append(unprovable[1])
    edited["claims"]["execution"]["positions"][unprovable[0]].sort()
    assert any("execution float32" in b for b in _rejected(edited))
    edited = copy.deepcopy(cert)
    edited["claims"]["execution"]["format"] = "bfloat16"  # the same positions: not proved
    assert any("execution bfloat16" in b for b in _rejected(edited))
    edited = copy.deepcopy(cert)
    edited["claims"]["execution"]["ulps"] = 1 << 16  # far less accurate exp / tanh
    assert _rejected(edited)
    edited = copy.deepcopy(cert)
    edited["claims"]["execution"]["ulps"] = 2  # without a new digest: rejected
    bad, unusable, _ = check(edited, ".")
    assert any(b.startswith("digest") for b in bad)
    for key, value in (("format", "tf32"), ("ulps", 0), ("ulps", "4"), ("extra", 1)):
        edited = copy.deepcopy(cert)
        edited["claims"]["execution"][key] = value
        bad, unusable, _ = check(redigest(edited), ".")
        assert unusable and "claims.execution" in bad[-1], (key, bad)
