"""The checker's operations for GPT-NeoX / LLaMA-style blocks: rigorous ``pi``, ``cos`` and
``sin`` (against python-flint's arb), rotary positions, SiLU and the gated product on balls
(every point of the input ball maps into the output ball), the checker's logit balls meet
the arb producer's, the header's new fields are read strictly, and tampering is caught: a
changed weight is rejected, a changed ``rotary_dims`` / ``kv_heads`` is rejected or unusable,
a changed label loses exactly that position."""

from __future__ import annotations

import copy
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import pytest
from lm_arch import arch_spec, certificate, self_labelled
from lm_models import redigest

from exactmem.checker.lm import lm_forward as L
from exactmem.checker.lm import lm_model, lm_ops, lm_trig, lm_verify
from exactmem.checker.verdict import Unusable
from exactmem.lm.positions import prove_positions
from exactmem.model.dataset import dataset_from_json

F = 128


@pytest.fixture(autouse=True)
def prec() -> Any:
    old = flint.ctx.prec
    flint.ctx.prec = 400
    yield
    flint.ctx.prec = old


def arb(num: int, f: int = F) -> Any:
    return flint.arb(flint.fmpq(num, 1 << f))


def inside(value: Any, lo: int, hi: int, f: int = F) -> bool:
    return bool(arb(lo, f) <= value.lower() and value.upper() <= arb(hi, f))


def test_pi_bounds() -> None:
    flint.ctx.prec = 1400
    for q in (10, 64, 300, 1200):
        lo, hi = lm_trig.pi_bounds(q)
        assert inside(flint.arb.pi(), lo, hi, q) and hi - lo < 4


@pytest.mark.parametrize("seed", range(4))
def test_cos_sin_enclose_the_exact_values(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(300):
        num = rnd.randint(-(1 << rnd.randint(1, 60)), 1 << rnd.randint(1, 60))
        scale, f = rnd.randint(0, 70), rnd.choice([40, 128, 200])
        (clo, chi), (slo, shi) = lm_trig.cos_sin(num, scale, f)
        a = flint.arb(flint.fmpq(num, 1 << scale))
        assert inside(a.cos(), clo, chi, f) and inside(a.sin(), slo, shi, f), (num, scale)
        assert chi - clo < 16 and shi - slo < 16  # tight
    (clo, chi), (slo, shi) = lm_trig.cos_sin(0, 0, F)
    assert (clo, chi, slo, shi) == (1 << F, 1 << F, 0, 0) or (clo <= 1 << F <= chi)


def _points(m: list[int], r: int, rnd: random.Random) -> list[list[Fraction]]:
    """Corners and random points of the ball ``(m, r)`` as exact rationals."""
    out = []
    for k in range(6):
        out.append([Fraction(x + (r if k == 0 else -r if k == 1 else rnd.randint(-r, r)),
                             1 << F) for x in m])
    return out


def _contains(m: list[int], r: int, values: list[Any]) -> bool:
    return all(inside(v, x - r, x + r) for x, v in zip(m, values, strict=True))


@pytest.mark.parametrize("seed", range(3))
def test_rotary_balls_contain_every_rotated_point(seed: int) -> None:
    rnd = random.Random(seed)
    heads, kv, dh = 4, 2, 8
    inv = ([[rnd.randint(1, 1 << 23) for _ in range(2)]], 23)  # two frequencies below 1
    tables = [lm_ops.rope_table(inv, p, F) for p in range(5)]
    width = (heads + 2 * kv) * dh
    rows = [[rnd.randint(-(1 << (F + 3)), 1 << (F + 3)) for _ in range(width)] for _ in range(5)]
    rads = [rnd.choice([0, 1, 1 << (F - 20)]) for _ in rows]
    out = [list(r) for r in rows]
    orads = lm_ops.rotary(out, rads, heads, kv, tables, F)
    for p, (row, r) in enumerate(zip(rows, rads, strict=True)):
        for x in _points(row, r, rnd):
            y: list[Any] = [flint.arb(flint.fmpq(v.numerator, v.denominator)) for v in x]
            for s0 in range(0, (heads + kv) * dh, dh):  # queries and keys, not values
                for j in range(2):
                    ang = p * flint.arb(flint.fmpq(inv[0][0][j], 1 << inv[1]))
                    a, b = y[s0 + j], y[s0 + j + 2]
                    y[s0 + j], y[s0 + j + 2] = a * ang.cos() - b * ang.sin(), \
                        b * ang.cos() + a * ang.sin()
            assert _contains(out[p], orads[p], y)


def test_silu_and_product_balls() -> None:
    rnd = random.Random(1)
    for r in (0, 1, 1 << (F - 30), 1 << (F - 8)):
        m = [rnd.randint(-(12 << F), 12 << F) for _ in range(16)] + [0, -(800 << F), 800 << F]
        out, rad = lm_ops.silu(m, r, F)
        for x in _points(m, r, rnd):
            v = [flint.arb(flint.fmpq(t.numerator, t.denominator)) for t in x]
            assert _contains(out, rad, [t / (1 + (-t).exp()) for t in v])
        # the Lipschitz widening, and the sigmoid's rounding times |x| <= 800 at the midpoint
        assert rad <= r * 1136 // 1000 + (r >> 8) + 1024
        b = [rnd.randint(-(3 << F), 3 << F) for _ in m]
        pm, pr = lm_ops.product((m, r), (b, 2 * r + 1), F)
        for x, y in zip(_points(m, r, rnd), _points(b, 2 * r + 1, rnd), strict=True):
            vals = [flint.arb(flint.fmpq(s.numerator * t.numerator, s.denominator * t.denominator))
                    for s, t in zip(x, y, strict=True)]
            assert _contains(pm, pr, vals)


SHAPES = {"rotary_dims": 4, "kv_heads": 1, "gated_mlp": True, "activation": "silu",
          "norm": "rmsnorm"}


@pytest.fixture(scope="module")
def llama_like() -> tuple[Any, dict[str, Any]]:
    spec = arch_spec(7, **SHAPES)
    return spec, certificate(spec, self_labelled(spec, 3, seed=2))


def test_checker_balls_meet_the_arb_producer(llama_like: tuple[Any, dict[str, Any]]) -> None:
    """Both enclose the exact logits, so they meet; the checker's are tight."""
    spec, cert = llama_like
    ds = dataset_from_json(cert["dataset"]["data"])
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    prove_positions(spec, [list(s) for s in ds.sequences], [list(y) for y in ds.labels],
                    producer="arb", on_logits=lambda i, a, b: seen.append((a, b)))
    net = lm_model.model(copy.deepcopy(cert["model"]))
    for i, (lo, hi) in enumerate(seen):
        outs = L.logits(net, list(ds.sequences[i]), range(ds.n))
        for p, (mids, rad) in outs.items():
            for k, mid in enumerate(mids):
                a, b = Fraction(float(lo[p, k])), Fraction(float(hi[p, k]))
                c, d = Fraction(mid - rad, 1 << F), Fraction(mid + rad, 1 << F)
                assert max(a, c) <= min(b, d), (i, p, k)
            assert rad < 1 << (F - 60)


def _check(cert: dict[str, Any]) -> tuple[list[str], bool, str | None, list[tuple[int, int]]]:
    lost: list[tuple[int, int]] = []
    bad, unusable, claim = lm_verify.check(cert, Path("."), unproved=lost)
    return bad, unusable, claim, lost


def test_a_changed_label_loses_exactly_that_position(
        llama_like: tuple[Any, dict[str, Any]]) -> None:
    spec, cert = llama_like
    bad, unusable, claim, _ = _check(cert)
    assert not bad and claim is not None and claim.startswith("24 of 24")
    c = copy.deepcopy(cert)
    labels = c["dataset"]["data"]["labels"]
    labels[1][5] = (labels[1][5] + 1) % spec.vocab_size
    c["dataset"]["sha256"] = dataset_from_json(c["dataset"]["data"]).sha256()
    bad, unusable, claim, lost = _check(redigest(c))
    assert not unusable and claim is None and lost == [(1, 5)] and len(bad) == 1


def _edit(cert: dict[str, Any], how: Any) -> dict[str, Any]:
    c = copy.deepcopy(cert)
    how(c["model"])
    return redigest(c)


def _negate_head_row(m: dict[str, Any], y: int) -> None:
    t = m["tensors"]["head"]
    d = t["shape"][1]
    t["values"][y * d:(y + 1) * d] = [str(-int(v)) for v in t["values"][y * d:(y + 1) * d]]


def _scale_inv_freq(m: dict[str, Any]) -> None:
    t = m["tensors"]["rope.inv_freq"]
    t["values"] = [str(int(v) * 5) for v in t["values"]]
    t["values"][0] = str(int(t["values"][0]) | 1)


def test_tampering_is_caught(llama_like: tuple[Any, dict[str, Any]]) -> None:
    spec, cert = llama_like
    y = cert["dataset"]["data"]["labels"][0][0]
    raw = copy.deepcopy(cert)
    _negate_head_row(raw["model"], y)
    bad, unusable, claim, _ = _check(raw)  # not re-digested: the digest fails
    assert not unusable and claim is None and bad[0].startswith("digest")
    bad, unusable, claim, lost = _check(_edit(cert, lambda m: _negate_head_row(m, y)))
    assert not unusable and claim is None and (0, 0) in lost
    bad, unusable, claim, lost = _check(_edit(cert, _scale_inv_freq))  # other frequencies
    assert not unusable and claim is None and lost
    for edit, where in ((lambda m: m.update(rotary_dims=2), "rope.inv_freq"),
                        (lambda m: m.pop("rotary_dims"), "model.tensors"),
                        (lambda m: m.pop("kv_heads"), "attn"),
                        (lambda m: m.pop("gated_mlp"), "model.tensors")):
        bad, unusable, claim, _ = _check(_edit(cert, edit))
        assert unusable and where in bad[-1], bad


def _retag(m: dict[str, Any], **kw: Any) -> None:
    m.update(kw)


@pytest.mark.parametrize(("edit", "message"), [
    ({"kv_heads": 0}, r"model.kv_heads: 0 is outside \[1, 1\]"),
    ({"kv_heads": 2}, r"model.kv_heads: 2 is outside"),
    ({"kv_heads": True}, "model.kv_heads: expected an integer"),
    ({"rotary_dims": 3}, "model.rotary_dims: expected an even number"),
    ({"rotary_dims": 6}, r"model.rotary_dims: 6 is outside \[2, 4\]"),
    ({"parallel_residual": False}, "model.parallel_residual: only true may be written"),
    ({"gated_mlp": 1}, "model.gated_mlp: only true"),
    ({"score_scale": True}, "model.score_scale: only false may be written"),
    ({"inverse_layer_scale": False}, "model.inverse_layer_scale: only true"),
    ({"activation": "swish"}, "model.activation"),
    ({"architecture": "post-ln-decoder", "parallel_residual": True},
     "model.parallel_residual: only in a pre-ln-decoder"),
    ({"rope": 1}, "model"),
])
def test_the_header_is_read_strictly(llama_like: tuple[Any, dict[str, Any]],
                                     edit: dict[str, Any], message: str) -> None:
    m = copy.deepcopy(llama_like[1]["model"])
    m.update(edit)
    with pytest.raises(Unusable, match=message):
        lm_model.model(m)


def test_a_huge_frequency_is_still_bounded() -> None:
    """A crafted ``inv_freq`` of 2**1000: the angle is reduced with ``pi`` at its size."""
    (clo, chi), (slo, shi) = lm_trig.cos_sin(7 << 1000, 0, F)
    a = flint.arb(7) * flint.arb(2) ** 1000
    flint.ctx.prec = 1400
    assert inside(a.cos(), clo, chi) and inside(a.sin(), slo, shi)
