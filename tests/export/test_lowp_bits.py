"""Label bits per narrow parameter: the lean int8 / bf16 layouts and the stored-bit reading
of ``info`` (each tensor charged the bits of the dtype the export writes it in: int8 / bf16
weight matrices, the narrowest exact dtype for the rest)."""

from __future__ import annotations

from typing import Any

import pytest

from exactmem.constructions import get
from exactmem.constructions.bounds import (
    bf16_exact,
    bit_figures,
    narrow_split,
    storage_dtype,
    stored_bits_of,
    stored_split,
)
from exactmem.datasets.draw import generate
from exactmem.model.sizes import sizes

BF16 = "bfloat16-weights/float32"


@pytest.fixture(scope="module")
def ds4096() -> Any:
    return generate(task="next-token", N=4096, n=16, vocab=64, classes=8, seed=1)


@pytest.mark.parametrize("con, claim, floor", [("dense-int8", "int8", 2.0),
                                               ("dense-bf16", BF16, 2.5)])
def test_two_label_bits_per_narrow_parameter_at_4096(ds4096: Any, con: str, claim: str,
                                                     floor: float) -> None:
    spec = get(con).build(ds4096, {"seed": 0}).spec
    fig = bit_figures(spec, ds4096, [claim])
    assert fig["label_bits_per_narrow"] >= floor
    assert fig["params_narrow"] == narrow_split(spec)[0]


def test_bf16_words_are_signed_nine_bit(ds4096: Any) -> None:
    res = get("dense-bf16").build(ds4096, {"seed": 0})
    assert res.params["fields_per_word"] == 3 and res.params["word_offset"] == 256
    ff = next(la for la in res.spec.layers if hasattr(la, "layers") and len(la.layers) == 5)
    words = [x for row in ff.layers[2].weight.num for x in row[-res.params["cols_a"]:]]
    assert min(words) < 0 < max(words) and max(abs(w) for w in words) <= 256


def test_stored_bits_count_the_narrow_widths(ds4096: Any) -> None:
    spec = get("dense-int8").build(ds4096, {"seed": 0}).spec
    narrow, wide = narrow_split(spec)
    assert narrow + wide == sizes(spec).params_dense
    f8 = bit_figures(spec, ds4096, ["int8"])
    split = stored_split(spec, "int8")
    assert sum(split.values()) == narrow + wide and split["int8"] >= narrow
    assert (f8["stored_dtype"], f8["stored_bits"]) == ("int8", stored_bits_of(split))
    assert f8["stored_bits"] < 8 * narrow + 32 * wide  # biases and table narrower than int32
    fb = bit_figures(spec, ds4096, [BF16])
    assert fb["stored_dtype"] == "bfloat16"
    assert fb["stored_bits"] == stored_bits_of(stored_split(spec, BF16)) < 16 * narrow + 32 * wide
    both = bit_figures(spec, ds4096, ["float32", "int8"])  # the fewest stored bits wins
    assert both["stored_bits"] == f8["stored_bits"] and both["narrow_claim"] == "int8"
    f32 = bit_figures(spec, ds4096, ["float32"])
    assert f32["stored_bits"] == 32 * (narrow + wide) and "params_narrow" not in f32


def test_info_prints_the_narrow_reading(tmp_path: Any, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    import json

    from exactmem.cli import main

    d = tmp_path / "d.json"
    assert main(["generate", "--N", "60", "--n", "12", "--vocab", "16", "--classes", "4",
                 "-o", str(d), "--quiet"]) == 0
    c = tmp_path / "c.json"
    assert main(["certify", str(d), "-c", "dense-int8", "--float-exact", "int8",
                 "-o", str(c), "-q"]) == 0
    capsys.readouterr()
    assert main(["info", str(c), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stored_dtype"] == "int8" and data["params_narrow"] > 0
    assert data["stored_bits"] < 32 * data["params_dense"]
    assert main(["info", str(c)]) == 0
    out = capsys.readouterr().out
    assert "label_bits_per_narrow" in out and "int8 (8 bits)" in out


@pytest.mark.parametrize("con, claim, dtype", [("dense-int8", "int8", "int8"),
                                               ("dense-bf16", BF16, "bfloat16")])
def test_info_stored_bits_are_the_safetensors_tensor_bytes(
        tmp_path: Any, capsys: pytest.CaptureFixture[str], con: str, claim: str,
        dtype: str) -> None:
    """``info``'s stored bits = the tensor bytes of the file ``export`` writes (x 8)."""
    import json

    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from exactmem.cli import main

    d, c, f = tmp_path / "d.json", tmp_path / "c.json", tmp_path / "net.safetensors"
    assert main(["generate", "--N", "200", "--n", "12", "--vocab", "16", "--classes", "8",
                 "--seed", "2", "-o", str(d), "--quiet"]) == 0
    assert main(["certify", str(d), "-c", con, "--float-exact", claim, "-o", str(c),
                 "-q"]) == 0
    assert main(["export", str(c), "--format", "safetensors", "--dtype", dtype, "-o", str(f),
                 "-q"]) == 0
    capsys.readouterr()
    assert main(["info", str(c), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    raw = f.read_bytes()
    header = int.from_bytes(raw[:8], "little")
    assert data["stored_bits"] == 8 * (len(raw) - 8 - header)
    narrow, wide = data["params_narrow"], data["params_dense"] - data["params_narrow"]
    bits = 8 if dtype == "int8" else 16
    assert data["stored_bits"] < bits * narrow + 32 * wide  # not every other tensor 32-bit


def test_storage_dtype_is_the_narrowest_exact_one() -> None:
    from exactmem.arith import ScaledMatrix

    def m(*xs: int, den: int = 1) -> ScaledMatrix:
        return ScaledMatrix(tuple((x,) for x in xs), den, 1)

    assert storage_dtype("int8", m(-128, 127), weight=False) == "int8"
    assert storage_dtype("int8", m(-129, 5), weight=False) == "int16"
    assert storage_dtype("int8", m(1 << 15), weight=False) == "int32"
    assert storage_dtype("int8", m(1 << 20), weight=True) == "int8"  # weights: the claim's
    assert storage_dtype(BF16, m(255, -256, 0), weight=False) == "bfloat16"
    assert storage_dtype(BF16, m(257), weight=False) == "float32"  # 9 significand bits
    assert storage_dtype(BF16, m(3, den=4), weight=False) == "bfloat16"
    assert storage_dtype(BF16, m(1, den=3), weight=False) == "float32"
    assert bf16_exact(1, 1 << 126) and not bf16_exact(1, 1 << 127)  # subnormal: no
    assert bf16_exact(255 << 120, 1) and not bf16_exact(1 << 128, 1)  # beyond the range
