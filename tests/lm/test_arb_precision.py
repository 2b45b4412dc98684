"""The arb blocks' precision (:mod:`exactmem.lm.arb_precision`): raised until the state
handed over has a radius below ``2^-TARGET``, so that a deep model is not left unproved for
want of bits; any precision proves the same positions when it suffices."""

from __future__ import annotations

import math

import flint
import numpy as np
import pytest
from lm_models import random_spec
from test_lm_split import data, pairs, sharp

from exactmem.lm import arb_precision as P
from exactmem.lm.arb import ArbNet
from exactmem.lm.positions import prove_positions


@pytest.mark.parametrize(("prec", "bits", "want"), [
    (128, [], 128),
    (128, [-math.inf, -math.inf], 128),
    (128, [-100.0, -80.0], 128),           # 2^-80 at 128 bits: already below 2^-64
    (128, [-60.0, -20.5], 192),            # 128 - 20 + 64 = 172, up to a multiple of 32
    (128, [-100.0, -70.0, math.inf, math.inf], 192),   # -70 + 2 * 32 extrapolated
    (128, [-100.0, -60.0, math.nan], 192),  # growth 40 a block: -60 + 40 = -20
    (128, [5.0, math.inf], 256),            # nothing below 1: twice the precision
    (1024, [-10.0], 1024),                  # never above MAX_PREC
    (512, [400.0], 1024),
])
def test_wanted(prec: int, bits: list[float], want: int) -> None:
    assert P.wanted(prec, bits) == want


def test_radius_bits() -> None:
    flint.ctx.prec = 128
    assert P.radius_bits([[flint.arb(1), flint.arb(2)]]) == -math.inf
    top = P.radius_bits([[flint.arb(1, 2.0 ** -10)], [flint.arb(0, 2.0 ** -20)]])
    assert -10 <= top < -9.99  # arb keeps a radius rounded up to 30 bits
    assert P.radius_bits([[flint.arb(1), flint.arb(0, math.inf)]]) == math.inf
    assert P.radius_bits([[flint.arb("nan")]]) == math.inf


def test_states_raise_the_precision_until_the_radius_is_small() -> None:
    spec = random_spec(np.random.default_rng(5), "gelu_tanh", tied=True)
    seqs, _ = data(spec)
    low = P.ArbStates(ArbNet(spec), prec=16)
    rows = low.run(seqs[:3], spec.layers, len(seqs[0]))
    assert low.raised >= 1 and low.prec > 16 and low.prec % P.STEP == 0
    assert P.radius_bits(rows) <= -P.TARGET
    flint.ctx.prec = 512
    ref = P.ArbStates(ArbNet(spec), prec=512)
    fine = ref.run(seqs[:3], spec.layers, len(seqs[0]))
    assert ref.raised == 0
    for r, s in zip(rows, fine, strict=True):  # the same real numbers in both balls
        assert all(a.overlaps(b) for a, b in zip(r, s, strict=True))


def test_a_short_start_proves_what_128_bits_prove(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = sharp(256.0)  # float64 from the embedding proves nothing: switch 0 climbs
    seqs, labels = data(spec)
    want = pairs(prove_positions(spec, seqs, labels, producer="arb", batch=5).proved)
    monkeypatch.setattr(P, "START", 8)  # 8 bits prove nothing without raising
    for producer, switch in (("arb", None), ("auto", 2), ("auto", 1), ("auto", 0)):
        got = prove_positions(spec, seqs, labels, producer=producer, batch=5, switch=switch)
        assert pairs(got.proved) == want, (producer, switch)
        if producer == "auto":
            assert got.arb_bits > 8


def test_a_deep_state_starts_from_the_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four blocks from 16 bits: two blocks of an 8-token probe (at 16, 32, 64 bits, until
    its radius is below 1) give the growth, so the state is computed once; without the
    guess it is computed again."""
    from lm_crafted import small_spec

    spec = small_spec(seed=2, v=9, t=12, d=16, heads=2, layers=4, d_ff=32)
    seqs = np.random.default_rng(1).integers(0, 9, size=(3, 12)).tolist()
    states = P.ArbStates(ArbNet(spec), prec=16)
    rows = states.run(seqs, 4, 12)
    assert states.guessed and states.raised == 0 and states.prec > 16
    assert P.radius_bits(rows) <= -P.TARGET
    monkeypatch.setattr(P.ArbStates, "guess", lambda self, chunk, depth: self.prec)
    plain = P.ArbStates(ArbNet(spec), prec=16)
    plain.run(seqs, 4, 12)
    assert plain.raised >= 1
