"""The dense float32-exact memorizer: certified with the float32 claim, every label exact in
onnxruntime float32, most dense entries label words, tampered words rejected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exactmem.certificate import spec_from_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate
from exactmem.constructions import get
from exactmem.constructions.bounds import bit_figures
from exactmem.constructions.dense_float32 import choose_shape
from exactmem.datasets.draw import generate
from exactmem.errors import ConstructionError
from exactmem.model.sizes import sizes
from exactmem.pipeline import certify


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    ds = generate(task="next-token", N=300, n=12, vocab=16, classes=8, seed=4)
    out = certify(ds, "dense-float32", {"seed": 1})
    assert out.report.verified, out.report.failures[:3]
    return out.certificate


def test_certified_with_the_float32_claim(cert: dict[str, Any]) -> None:
    assert cert["claims"]["float_exact"] == ["float32"]
    assert cert["sizes"]["max_bits"] <= 24
    report = check_certificate(cert)
    assert report.verified and "float-exact in float32" in report.claim


def test_onnxruntime_float32_gets_every_label_exactly(cert: dict[str, Any]) -> None:
    pytest.importorskip("onnxruntime")
    from exactmem.certificate import dataset_from_certificate
    from exactmem.exporters.onnx_export import build_model, dataset_array, run_onnx

    ds = dataset_from_certificate(cert)
    outs, labels = run_onnx(build_model(spec_from_certificate(cert), "float32"),
                            dataset_array(ds, "float32"))
    assert outs.dtype == np.float32
    assert (outs[:, -1, 0].astype(np.float64) == np.array(ds.labels)).all()
    assert (labels == np.array(ds.labels)).all()


def _words(cert: dict[str, Any]) -> list[list[str]]:
    """The word matrix (third map) of the first lookup block."""
    ff = next(la for la in cert["network"]["layers"]
              if la["type"] == "feedforward" and len(la["maps"]) == 4)
    return ff["maps"][2]["weight"]


def test_a_word_beyond_float32_is_rejected(cert: dict[str, Any]) -> None:
    bad = copy.deepcopy(cert)
    words = _words(bad)
    r, c = next((r, c) for r, row in enumerate(words) for c, x in enumerate(row) if x != "0")
    words[r][c] = str(int(words[r][c]) + 2 ** 24)  # not a float32 (25 significant bits)
    bad["sizes"] = sizes(spec_from_certificate(bad)).as_dict()
    bad["digest"] = digest_of(bad)
    report = check_certificate(bad)
    assert not report.verified
    assert any("float_exact: not exact in float32" in f for f in report.failures)


def test_most_dense_entries_are_words_at_16384() -> None:
    """N = 2^14, n = 16, vocabulary 64, 8 classes: above 4 label bits per dense parameter
    (trained GPT-style models: 3.83 in float32, Morris et al. 2025)."""
    ds = generate(task="next-token", N=1 << 14, n=16, vocab=64, classes=8, seed=1)
    res = get("dense-float32").build(ds, {"seed": 0})
    fig = bit_figures(res.spec, ds, ["float32"])
    assert fig["label_bits_per_dense"] > 4
    assert sizes(res.spec).max_bits <= 24
    words = 3 * res.params["words_per_table"]
    assert words > sizes(res.spec).params_dense / 4


def test_shape_covers_the_words() -> None:
    for words in (1, 7, 100, 255, 256, 257, 4000):
        G, La, Lb = choose_shape(words, 64, 7)  # noqa: N806
        assert G * La * Lb >= words and max(G, La, Lb) <= 64
    with pytest.raises(ConstructionError, match="do not fit a vocabulary"):
        choose_shape(5000, 16, 7)


def test_refusals() -> None:
    short = generate(task="next-token", N=20, n=8, vocab=16, classes=4, seed=2)
    with pytest.raises(ConstructionError, match="reads 11 positions"):
        get("dense-float32").build(short, {})
    ds = generate(task="next-token", N=20, n=12, vocab=16, classes=4, seed=2)
    with pytest.raises(ConstructionError, match="float32"):
        get("dense-float32").build(ds, {"max_bits": 8})


def test_cli_short_sequences_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.cli import main

    d = tmp_path / "d.json"
    assert main(["generate", "--N", "20", "--n", "8", "--vocab", "16", "--classes", "4",
                 "-o", str(d), "--quiet"]) == 0
    assert main(["certify", str(d), "-c", "dense-float32", "-o", str(tmp_path / "c.json"),
                 "-q"]) == 2
    err = capsys.readouterr().err
    assert "reads 11 positions" in err and "Traceback" not in err


def test_int64_attention_sum_does_not_overflow() -> None:
    """Values just below 2^62 summed over four keys leave int64: the exact pass must switch
    to Python integers (an unchecked int64 sum wraps around)."""
    from exactmem.arith import ScaledMatrix
    from exactmem.model.forward import forward
    from exactmem.model.spec import Attention, Embedding, Head, NetworkSpec, Readout

    ds = generate(task="next-token", N=6, n=4, vocab=3, classes=2, seed=1)
    big = (1 << 62) - 8
    table = ScaledMatrix(((big, big - 1, big - 2),), 1, 3)
    one, zero = ScaledMatrix(((1,),), 1, 1), ScaledMatrix(((0,),), 1, 1)
    spec = NetworkSpec("token-ids", 3, 4, (
        Embedding(table),
        Attention((Head(query=zero, key=zero, value=one, output=one),), kind="uniform",
                  residual=False)), Readout("scalar", "last"))
    state = forward(spec, ds)
    for i, seq in enumerate(ds.sequences):
        got = state.cols[0, state.index[i, -1]]
        want = sum(big - int(t) for t in seq)
        assert int(got) * 4 == want * state.den


def test_int64_dedupe_matches_the_python_loop() -> None:
    import numpy as np

    from exactmem.model.forward import dedupe_columns

    rng = np.random.default_rng(3)
    cols = rng.integers(0, 3, size=(3, 40)).astype(np.int64)
    index = rng.integers(-1, 40, size=(5, 8)).astype(np.int64)
    fast = dedupe_columns(cols, index)
    slow = dedupe_columns(cols.astype(object), index)
    assert (fast[0] == slow[0].astype(np.int64)).all() and (fast[1] == slow[1]).all()

