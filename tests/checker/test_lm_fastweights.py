"""The bulk weights decoder (:mod:`exactmem.checker.lm.lm_fastweights`, the fast path) against
the standard-library reader :func:`lm_weights.exact`: the same integers, the same scale, the
same failures (NaN, infinity, numerator width) with the same texts, on every half-width bit
pattern and on float32/float64 tensors with zeros, subnormals and extremes; a bound
certificate gets the same verdict and claim on both paths, a changed file the same
rejection."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_models import random_spec, self_labelled

from exactmem.checker.lm import lm_fastweights, lm_weights
from exactmem.checker.verdict import Unusable
from exactmem.checker.verify import check_certificate
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.weightsfile import write_weights

pytestmark = pytest.mark.skipif(not lm_fastweights.available(), reason="NumPy not importable")


def _both(data: bytes, dtype: str, shape: list[int]) -> tuple[Any, Any]:
    raw = memoryview(data)
    ebits, mbits = lm_weights.LAYOUTS[dtype]

    def run(f: Any) -> Any:
        try:
            return f()
        except Unusable as exc:
            return "Unusable: " + str(exc)

    return (run(lambda: lm_weights.exact(raw, dtype, shape, "w")),
            run(lambda: lm_fastweights.exact(raw, ebits, mbits, lm_weights.SIZES[dtype], "w",
                                             shape, lm_weights.MAX_SCALE,
                                             lm_weights.MAX_VALUE_BITS)))


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_every_half_width_bit_pattern_decodes_as_the_reference(dtype: str) -> None:
    bits = np.arange(1 << 16, dtype="<u2")
    ebits, mbits = lm_weights.LAYOUTS[dtype]
    finite = bits[((bits >> mbits) & ((1 << ebits) - 1)) != (1 << ebits) - 1]
    ref, fast = _both(finite.tobytes(), dtype, [finite.size])
    assert isinstance(ref, tuple) and ref == fast
    ref, fast = _both(finite.tobytes(), dtype, [256, finite.size // 256])
    assert ref == fast
    ref, fast = _both(bits.tobytes(), dtype, [bits.size])  # NaN/infinity: the same text
    assert isinstance(ref, str) and "infinity" in ref and ref == fast


CASES = ["random", "zeros", "inf", "nan", "subnormal", "integers", "extremes", "negzero"]


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("dtype", ["F32", "F64", "F16"])
def test_float_tensors_decode_as_the_reference(dtype: str, kind: str) -> None:
    npt = {"F32": np.float32, "F64": np.float64, "F16": np.float16}[dtype]
    rng = np.random.default_rng(CASES.index(kind))
    info = np.finfo(npt)
    for n in (0, 1, 7, 64):
        wide = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        x = np.clip(wide, -float(info.max), float(info.max)).astype(npt)  # finite
        if kind == "zeros":
            x[:] = 0
        elif n and kind == "inf":
            x[n // 2] = -np.inf
        elif n and kind == "nan":
            x[-1] = np.nan
        elif n and kind == "subnormal":
            x[n // 2] = info.smallest_subnormal
        elif kind == "integers":
            x = np.round(np.clip(x, -1000, 1000)).astype(npt)
        elif n and kind == "extremes":
            x[0], x[-1] = info.max, -info.tiny
        elif n and kind == "negzero":
            x[0] = -0.0
        for shape in ([n], [1, n] if n else [0, 3]):
            ref, fast = _both(x.tobytes(), dtype, shape)
            assert ref == fast, (shape, str(ref)[:200], str(fast)[:200])
            if kind in ("inf", "nan") and n:
                assert isinstance(ref, str) and ("NaN" if kind == "nan" else "infinity") in ref


def test_wide_numerators_take_the_integer_route_and_the_limit_holds() -> None:
    x = np.array([1.5, 2.0 ** 70, -(2.0 ** -30), 3.0], dtype=np.float64)  # > 62 bits
    ref, fast = _both(x.tobytes(), "F64", [2, 2])
    assert isinstance(ref, tuple) and ref == fast
    x = np.array([np.finfo(np.float64).smallest_subnormal, 2.0 ** 1000])
    ref, fast = _both(x.tobytes(), "F64", [2])
    assert isinstance(ref, str) and "2075 bits exceeds the limit of 1024" in ref and ref == fast


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    spec = random_spec(np.random.default_rng(7), "gelu_tanh", tied=False)
    ds = self_labelled(spec, 3, (2, 5))
    folder = tmp_path_factory.mktemp("fw")
    with open(folder / "w.safetensors", "wb") as fh:
        binding = write_weights(spec, fh, "w.safetensors")
    cert = build_lm_certificate(spec, ds, [list(range(5))] * 2, partial=False,
                                weights=binding)
    return cert, folder


def test_a_bound_certificate_gets_the_same_report_on_both_paths(
        bound: tuple[dict[str, Any], Path]) -> None:
    cert, folder = bound
    fast = check_certificate(copy.deepcopy(cert), folder)
    ref = check_certificate(copy.deepcopy(cert), folder, reference=True)
    assert fast.verified and ref.verified and fast.claim == ref.claim
    assert fast.counts == ref.counts


def test_a_changed_byte_is_rejected_on_both_paths(bound: tuple[dict[str, Any], Path],
                                                  tmp_path: Path) -> None:
    cert, folder = bound
    data = bytearray((folder / "w.safetensors").read_bytes())
    data[-3] ^= 0x10
    (tmp_path / "w.safetensors").write_bytes(bytes(data))
    for reference in (False, True):
        report = check_certificate(copy.deepcopy(cert), tmp_path, reference=reference)
        assert not report.verified and not report.unusable
        assert any("not the file the certificate binds" in f for f in report.failures)
