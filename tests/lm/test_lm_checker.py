"""The LM checker's strict reading: crafted certificates get an answer (unusable or
rejected, naming the field), never a crash; an untouched one is verified."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_models import random_spec, redigest, self_labelled

from exactmem.checker.verify import check_certificate
from exactmem.lm.certfile import build_lm_certificate

Cert = dict[str, Any]


@pytest.fixture(scope="module")
def cert() -> Cert:
    spec = random_spec(np.random.default_rng(11), "gelu_tanh", tied=True)
    ds = self_labelled(spec, 12, (2, 5))
    return build_lm_certificate(spec, ds, [list(range(5))] * 2, partial=False)


def test_the_untouched_certificate_is_verified(cert: Cert) -> None:
    report = check_certificate(copy.deepcopy(cert), Path("."))
    assert report.verified and report.claim is not None
    assert report.claim.startswith("10 of 10 positions have the label as unique argmax")


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Cert], None]:
    def edit(c: Cert) -> None:
        target = c
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


T = ("model", "tensors")
MUTATIONS = [
    (_set(("model", "heads"), 3), "does not divide"),
    (_set(("model", "activation"), "swish"), "model.activation"),
    (_set(("model", "layer_norm_eps"), "-1/2"), "layer_norm_eps"),
    (_set(("model", "layer_norm_eps"), 1e-5), "layer_norm_eps"),
    (_set(("model", "tied_head"), 1), "tied_head"),
    (_set((*T, "wte", "shape"), [11, 9]), "wte.shape"),
    (_set((*T, "wte", "scale"), -1), "wte.scale"),
    (_set((*T, "wte", "values", 0), 3), "wte.values[0]"),
    (_set((*T, "wte", "values", 0), "1/2"), "wte.values[0]"),
    (_set((*T, "wte", "values", 0), "007"), "wte.values[0]"),
    (lambda c: c["model"]["tensors"].pop("h1.mlp.fc.weight"), "h1.mlp.fc.weight: missing"),
    (_set((*T, "h0.extra"), {}), "h0.extra"),
    (_set(("claims", "positions", 0), [3, 1]), "strictly increasing"),
    (_set(("claims", "positions", 0), [0, 1]), "without partial every position"),
    (_set(("claims", "positions", 0), [9]), "claims.positions[0][0]"),
    (_set(("claims", "partial"), "yes"), "claims.partial"),
    (_set(("dataset", "data", "vocab_size"), 12), "more than the model's vocabulary"),
    (_set(("dataset", "data", "task"), "next-token"), "labels[0]"),
    (lambda c: c.pop("claims"), "claims: missing"),
]


@pytest.mark.parametrize(("edit", "message"), MUTATIONS)
def test_a_crafted_certificate_is_unusable_naming_the_field(cert: Cert, edit: Any,
                                                             message: str) -> None:
    c = copy.deepcopy(cert)
    edit(c)
    report = check_certificate(redigest(c) if "claims" in c else c, Path("."))
    assert report.unusable and report.exit_code == 2
    assert any(message in f for f in report.failures), report.failures


def test_a_wrong_scale_moves_every_weight_and_is_rejected(cert: Cert) -> None:
    c = copy.deepcopy(cert)
    c["model"]["tensors"]["wte"]["scale"] += 3  # all of wte / 8: logits shrink, argmaxes move
    c["model"]["tensors"]["h0.mlp.fc.weight"]["scale"] -= 2
    report = check_certificate(redigest(c), Path("."))
    assert report.verified is False and not report.unusable and report.failures
