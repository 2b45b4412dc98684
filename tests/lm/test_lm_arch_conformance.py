"""Conformance of the checker with the producer on the GPT-NeoX / LLaMA options: on a grid
of configurations (rotary positions, grouped-query attention, parallel residual, gated MLP,
SiLU, GPT-2's score options, with the older options), the checker's tensor schema is the
producer's, the certificate's header reads back as the same spec, the checker's logit
midpoints agree with the producer's float64 forward pass within their radii, and a GPT-2
certificate carries none of the new fields."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_arch import arch_spec, certificate, self_labelled

from exactmem.checker.lm import lm_forward as L
from exactmem.checker.lm import lm_model, lm_verify
from exactmem.lm.certfile import model_json, spec_from_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64

GRID: list[dict[str, Any]] = [
    {},
    {"rotary_dims": 2, "kv_heads": 1, "norm": "rmsnorm", "gated_mlp": True,
     "activation": "silu", "biases": False},
    {"rotary_dims": 4, "parallel_residual": True},
    {"score_scale": False, "inverse_layer_scale": True, "activation": "gelu_erf"},
    {"heads": 4, "d": 16, "kv_heads": 2, "rotary_dims": 2, "parallel_residual": True,
     "gated_mlp": True, "tied": True},
    {"norm_first": False, "inverse_layer_scale": True, "activation": "relu"},
    {"final_norm": False, "activation": "silu", "kv_heads": 1},
]
IDS = ["gpt2", "llama", "neox", "scores", "gqa4", "post-ln", "no-lnf"]


@pytest.fixture(scope="module", params=GRID, ids=IDS)
def case(request: Any) -> tuple[LMSpec, dict[str, Any]]:
    spec = arch_spec(3, **request.param)
    return spec, certificate(spec, self_labelled(spec, 2))


def test_the_schemas_agree(case: tuple[LMSpec, dict[str, Any]]) -> None:
    spec, cert = case
    head = lm_model.header(cert["model"])
    req, opt = lm_model.tensor_names(head)
    mine_req, mine_opt = spec.names()
    assert sorted(req) == sorted(mine_req) and sorted(opt) == sorted(mine_opt)
    checker = lm_model.shapes(head)
    for name, shape in spec.shapes().items():
        assert checker[name] == shape, name


def test_the_header_reads_back(case: tuple[LMSpec, dict[str, Any]]) -> None:
    spec, cert = case
    back = spec_from_lm_certificate(cert)
    for f in dataclasses.fields(LMSpec):
        if f.name != "tensors":
            mine, theirs = getattr(spec, f.name), getattr(back, f.name)
            assert mine == theirs or (f.name == "kv_heads" and back.n_kv == spec.n_kv), f.name
    assert back.tensors.keys() == spec.tensors.keys()
    assert all((back.tensors[k] == v).all() for k, v in spec.tensors.items())


def test_midpoints_agree_with_float64(case: tuple[LMSpec, dict[str, Any]]) -> None:
    """The checker's logit balls hold the float64 logits up to float64's own rounding."""
    spec, cert = case
    net = lm_model.model(json.loads(json.dumps(cert["model"])))
    toks = np.array(cert["dataset"]["data"]["sequences"])
    z = logits64(spec, toks)
    for i, row in enumerate(toks.tolist()):
        outs = L.logits(net, row, range(len(row)))
        for p, (mids, rad) in outs.items():
            assert rad < 1 << (L.F - 40)  # tight: below 2**-40
            gap = np.abs(np.array(mids, dtype=object) - np.array(
                [int(Fraction(x) * (1 << L.F)) for x in z[i, p].tolist()], dtype=object))
            assert max(gap) <= rad + (1 << (L.F - 30)), (i, p)


def test_every_position_checks(case: tuple[LMSpec, dict[str, Any]]) -> None:
    spec, cert = case
    bad, unusable, claim = lm_verify.check(cert, Path("."))
    assert not unusable and not bad, bad[:3]
    assert claim is not None and claim.startswith("16 of 16 positions")


def test_gpt2_certificates_carry_no_new_field() -> None:
    spec = arch_spec(1)
    keys = set(model_json(spec))
    assert keys.isdisjoint({"kv_heads", "rotary_dims", "parallel_residual", "gated_mlp",
                            "score_scale", "inverse_layer_scale"})
    same = dataclasses.replace(spec, kv_heads=spec.heads)  # kv_heads = heads is the default
    assert model_json(same) == model_json(spec)
