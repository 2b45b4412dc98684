"""The figures beside the theorems: upper bounds with the width factor and the real r/delta,
lower bounds, optimality gaps and the bit figures."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from exactmem.arith import ScaledMatrix
from exactmem.certificate import dataset_from_certificate, spec_from_certificate
from exactmem.constructions import get
from exactmem.constructions.bounds import figures, lower_bounds, weight_bits
from exactmem.constructions.kajitsuka2025_next_token import theorem_bound
from exactmem.datasets.draw import generate
from exactmem.model import sizes
from exactmem.pipeline import certify

NEXT, S2S = "kajitsuka2025-next-token", "kajitsuka2025-seq2seq"


def test_weight_bits_counts_numerator_and_denominator() -> None:
    m = ScaledMatrix.from_rows([[Fraction(3, 4), 0, -5], [Fraction(1, 2), 0, 0]])
    # 3/4: 2 + 3 bits; -5: 3 + 1; 1/2: 1 + 2
    assert weight_bits(m) == 5 + 4 + 3
    assert weight_bits(ScaledMatrix.zeros(2, 2)) == 0


def test_theorem_bound_formulas() -> None:
    b = theorem_bound(1024, 16, 64, 2, token_ids=True)
    R = 200 * math.sqrt(3) * 16 ** 2 * 1024 ** 5 * 64 * math.pi  # noqa: N806
    term = math.sqrt(1024 / 10) * math.log2(R)
    assert b["depth"] == math.ceil(math.sqrt(10240) + term) == 851
    assert b["bits"] == math.ceil(6 + term) == 756
    assert b["params"] == 3 * 64 + 851 * 14 * 15 + 5 * 14
    wide = theorem_bound(1024, 16, 64, 2, token_ids=True, r_over_delta=2 ** 20)
    assert wide["depth"] > b["depth"] and wide["bits"] > b["bits"]
    vec = theorem_bound(1024, 16, 3, 2)
    assert vec["theorem"] == "B.1" and vec["params"] == 14 * 3 + vec["depth"] * 210 + 70


def test_lower_bounds_forms() -> None:
    low = lower_bounds("next-token", 4096, 16, 8, 10_000, 100)
    assert low["thm_4_2"]["value"] == 64 and low["thm_4_2"]["gap"] == round(10_000 / 64, 3)
    assert low["counting"]["value"] == round(4096 * 3 / 201, 3)
    assert "thm_4_3" not in low
    s2s = lower_bounds("seq2seq", 1024, 4, 2, 5000, 50)
    nn = 4096
    assert s2s["thm_4_3"]["value"] == round(math.sqrt(nn / (9 * math.log2(48 * math.e * nn))), 3)
    assert s2s["counting"]["value"] == round(nn / 101, 3)
    assert s2s["thm_4_2"]["value"] == 32


@pytest.mark.parametrize("name,task,dim", [(NEXT, "next-token", 3), (S2S, "seq2seq", None)])
def test_figures_of_a_certificate(name: str, task: str, dim: int | None) -> None:
    ds = generate(task, N=60, n=4, vocab=9, classes=4, seed=2, dim=dim)  # type: ignore[arg-type]
    cert = certify(ds, name).certificate
    assert cert["sizes"].keys() == {"params_dense", "params_nonzero", "depth", "width",
                                    "max_bits"}
    spec, data = spec_from_certificate(cert), dataset_from_certificate(cert)
    params = cert["construction"]["params"]
    fig = figures(spec, data, name, params)
    sz = sizes(spec)
    points = 60 if task == "next-token" else 240
    assert fig["label_bits"] == points * 2
    assert fig["label_bits_per_nonzero"] == round(points * 2 / sz.params_nonzero, 6)
    assert fig["label_bits_per_dense"] == round(points * 2 / sz.params_dense, 6)
    # no float-exact claim passed: the file is float64, export's default
    assert fig["stored_dtype"] == "float64" and not fig["stored_dtype_exact"]
    assert fig["label_bits_per_stored_bit"] == round(points * 2 / (64 * sz.params_dense), 6)
    assert sz.params_nonzero <= fig["weight_bits_total"] <= 2 * sz.max_bits * sz.params_nonzero
    assert fig["weight_bits_max_nonzero"] == sz.max_bits * sz.params_nonzero
    assert fig["embedding_nonzero"] + fig["rest_nonzero"] == sz.params_nonzero
    assert (fig["embedding_nonzero"] > 0) == (dim is None)
    b = fig["bound"]
    if dim is None:
        assert b["r_over_delta"] == 1
    else:  # the real r / delta of the certificate, not 1
        rd = math.sqrt(Fraction(params["r_squared"]) / Fraction(params["delta_squared"]))
        assert b["r_over_delta"] == round(rd, 6) and rd > 1
    assert all(0 < v < 1 for v in fig["measured_over_bound"].values())
    gap = fig["optimality_gap"]
    assert gap["params_over_thm_4_2"] == round(sz.params_nonzero / round(math.sqrt(60), 3), 3)
    assert gap["weight_bits_over_label_bits"] > 1
    assert ("params_over_thm_4_3" in gap) == (task == "seq2seq")


def test_vardi_token_ids_split() -> None:
    ds = generate("next-token", N=64, n=1, vocab=256, classes=4, seed=1)
    res = get("vardi2022-relu").build(ds, {})
    fig = figures(res.spec, ds, "vardi2022-relu", dict(res.params))
    assert fig["embedding_nonzero"] == 64
    assert fig["bound"]["lemma"] == "C.1" and fig["bound"]["params"] >= 256


def test_info_reports_the_figures_and_keeps_the_sizes() -> None:
    from exactmem.certificate.figures import info

    ds = generate("next-token", N=40, n=4, vocab=6, classes=3, seed=1)
    cert = certify(ds, NEXT).certificate
    out = info(cert)
    for key in ("params_dense", "params_nonzero", "depth", "width", "max_bits"):
        assert out[key] == cert["sizes"][key]
    assert out["label_bits_per_nonzero"] == round(40 * math.log2(3) / out["params_nonzero"], 6)
    assert out["bound"]["params"] > out["params_nonzero"]
    assert out["lower_bounds"]["thm_4_2"]["value"] == round(math.sqrt(40), 3)
    assert {"params_over_thm_4_2", "params_over_counting",
            "weight_bits_over_label_bits"} <= out["optimality_gap"].keys()
    assert out["embedding_nonzero"] + out["rest_nonzero"] == out["params_nonzero"]
