"""GELU (tanh form) in one loop (exactmem/checker/lm/lm_fusedgelu.py, docs/checker.md "Fast
path"): the same midpoints and radius as ``lm_forward.gelu`` on random and edge balls, at
every precision it takes; the fast path runs it, ``check --reference`` does not."""

from __future__ import annotations

import random
from typing import Any

import pytest

from exactmem.checker.lm import lm_forward, lm_fusedgelu, lm_model
from tests.checker.test_lm_limbs import _certificates


def _reference(m: list[int], r: int, f: int) -> tuple[list[int], int]:
    return lm_forward.gelu("gelu_tanh", m, r, lm_forward.constants(16, f), f)


def _edges(f: int) -> list[int]:
    cap = 1 << (f + 16)  # where lm_forward.gelu clamps the cube's ends
    return [0, 1, -1, 2, -2, 1 << f, -(1 << f), cap - 1, cap, cap + 1, -cap - 1, -cap,
            1 << (f + 40), -(1 << (f + 40)), (1 << (f + 5)) + 3, -(1 << (f + 5)) - 3]


@pytest.mark.parametrize("f", [8, 24, 30, 64, 128, 200, 256])
def test_the_same_integers_as_the_reference(f: int) -> None:
    rnd = random.Random(f)
    consts = lm_forward.constants(16, f)
    assert lm_fusedgelu.available(f)
    for radius_bits in (0, 1, 5, 13, 40, f // 2, f - 12, f, f + 20):
        for scale in (0.01, 1.0, 6.0, 40.0):
            m = [int(rnd.gauss(0, scale) * (1 << f)) for _ in range(24)] + _edges(f)
            r = rnd.getrandbits(radius_bits) if radius_bits > 0 else 0
            assert lm_fusedgelu.gelu_tanh(m, r, consts, f) == _reference(m, r, f), \
                (f, radius_bits, scale)


def test_beyond_the_tables_the_reference_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    f = 300
    assert not lm_fusedgelu.available(f)
    consts: dict[str, Any] = dict(lm_forward.constants(16, f), fused_gelu=True)
    monkeypatch.setattr(lm_fusedgelu, "gelu_tanh", lambda *a: pytest.fail("ran at f > 256"))
    m = [5 << f, -(3 << (f - 2)), 0]
    assert lm_forward.gelu("gelu_tanh", m, 7, consts, f) == _reference(m, 7, f)


def test_the_fast_path_runs_it_and_reference_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    _, cert = _certificates()[0]  # a gelu_tanh model
    calls = []
    real = lm_fusedgelu.gelu_tanh

    def counted(*a: Any) -> tuple[list[int], int]:
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(lm_fusedgelu, "gelu_tanh", counted)
    fast, ref = lm_model.model(cert["model"]), lm_model.model(cert["model"], fast=False)
    assert fast["consts"].get("fused_gelu") and not ref["consts"].get("fused_gelu")
    m, r = [3 << 120, -(5 << 118), 1], 1 << 20  # a tight ball: not lm_fastgelu's
    assert lm_forward.gelu("gelu_tanh", m, r, fast["consts"], 128) == _reference(m, r, 128)
    assert calls
    calls.clear()
    lm_forward.gelu("gelu_tanh", m, r, ref["consts"], 128)
    assert not calls


def test_a_wrong_constant_is_seen() -> None:
    """The loop uses its constants: a bound of sqrt(2/pi) off by one unit changes a ball."""
    f = 64
    consts = lm_forward.constants(16, f)
    clo, chi = consts["c"]
    m = [int(x * (1 << f)) for x in (0.3, -1.7, 2.5)]
    wrong = dict(consts, c=(clo - (1 << 20), chi))
    assert lm_fusedgelu.gelu_tanh(m, 1 << 4, wrong, f) != _reference(m, 1 << 4, f)
