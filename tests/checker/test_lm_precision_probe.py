"""The checker's working precision (``lm_model.prepared``): probed again at twice the
precision while the balls grow past an attention score radius of 1, then raised to about
``2^-28`` at the logits; a model prepared again at another precision shares the weight
columns and limbs of the first, with the same integers as one prepared from scratch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from lm_crafted import self_labelled, small_spec

from exactmem.checker.lm import lm_bounds, lm_forward, lm_limbs, lm_model
from exactmem.lm.certfile import build_lm_certificate


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    spec = small_spec(seed=7, v=9, t=6, d=8, heads=2, layers=2, d_ff=16, tied=False,
                      act="gelu_tanh")
    return build_lm_certificate(spec, self_labelled(spec, 3), [list(range(6))] * 3,
                                partial=True)


def _plain(net: dict[str, Any]) -> dict[str, Any]:
    """Every value of a prepared model that :func:`lm_forward.logits` reads, limbs as their
    planes (so equal models compare equal)."""
    def item(v: Any) -> Any:
        if isinstance(v, lm_limbs.Linear):
            return (tuple(v), v.limbs.planes.tobytes(), v.limbs.umax, v.limbs.bits)
        if isinstance(v, dict):
            return {k: item(x) for k, x in v.items() if k not in ("parsed", "rope_cache")}
        if isinstance(v, (list, tuple)):
            return [item(x) for x in v]
        if isinstance(v, np.ndarray):
            return (v.dtype.str, v.shape, v.tobytes())
        return v
    return item(net)  # type: ignore[no-any-return]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("f", [128, 192, 512])
def test_a_model_prepared_again_is_the_one_prepared_anew(cert: dict[str, Any], fast: bool,
                                                         f: int) -> None:
    base = lm_model.model(cert["model"], fast=fast)
    again = lm_model.at_precision(base["parsed"], f, base)
    fresh = lm_model.at_precision(base["parsed"], f)
    assert again["f"] == fresh["f"] == f
    assert _plain(again) == _plain(fresh)
    head = again["head"]
    assert head[0] is base["head"][0]  # the columns are shared, not made again
    assert fast == isinstance(head, lm_limbs.Linear)
    if fast:
        assert head.limbs is base["head"].limbs


def test_probes_double_while_the_balls_outgrow_the_precision(
        cert: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Degenerate below 512 bits; at 512 a logit radius of 2^300 units (2^-212): the
    balls grow by 2^300, so 336 bits bring it to about 2^-28."""
    net = lm_model.model(cert["model"])
    seen: list[int] = []

    def logits(n: dict[str, Any], toks: Any, pos: list[int]) -> dict[int, Any]:
        seen.append(n["f"])
        if n["f"] < 512:
            raise lm_bounds.Degenerate("a score radius exceeds 1")
        return {p: ([0], 1 << 299) for p in pos}

    monkeypatch.setattr(lm_forward, "logits", logits)
    toks = cert["dataset"]["data"]["sequences"]
    got = lm_model.prepared(net, toks, [[0, 1]] * 3, False)
    assert seen == [128, 256, 512] and got["f"] == 336
    seen.clear()
    assert lm_model.prepared(net, toks, [[]] * 3, False) is net and seen == []


@pytest.mark.parametrize(("bits", "want"), [(100, 128), (116, 128), (117, 160), (2000, 1024)])
def test_the_logit_radius_sets_the_precision(cert: dict[str, Any], bits: int, want: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    net = lm_model.model(cert["model"])
    monkeypatch.setattr(lm_forward, "logits",
                        lambda n, toks, pos: {p: ([0], (1 << bits) - 1) for p in pos})
    toks = cert["dataset"]["data"]["sequences"]
    assert lm_model.prepared(net, toks, [[0]] * 3, False)["f"] == want


def test_degenerate_at_max_f_stays_there(cert: dict[str, Any],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    net = lm_model.model(cert["model"])

    def logits(n: dict[str, Any], toks: Any, pos: list[int]) -> dict[int, Any]:
        raise lm_bounds.Degenerate("a score radius exceeds 1")

    monkeypatch.setattr(lm_forward, "logits", logits)
    toks = cert["dataset"]["data"]["sequences"]
    assert lm_model.prepared(net, toks, [[0]] * 3, False)["f"] == lm_model.MAX_F
