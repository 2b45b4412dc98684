"""Models of the integer matmul kernels CPUs run, outside the code under test.

``MatMulInteger`` (uint8 activations x int8 weights) is computed by different instructions on
different CPUs.  Two models cover them (docs/float-exact.md, the integer execution model):

- :func:`pair_saturating_matmul`: x86 AVX2 ``VPMADDUBSW`` -- multiply u8 by s8, add each
  *pair* of adjacent products in a signed 16-bit register **with saturation** to
  ``[-32768, 32767]``, then add the pair sums in int32 (``VPMADDWD`` by ones, ``VPADDD``).
  This is onnxruntime's u8s8 kernel on CPUs without VNNI.
- :func:`quad_matmul`: AVX-VNNI / AVX-512 VNNI ``VPDPBUSD`` and Arm ``SDOT``/``USDOT``: four
  products added into an int32 lane (no 16-bit step): the exact value while int32 holds it.

:func:`run_with_kernel` evaluates a whole ONNX graph with onnx's reference evaluator, its
``MatMulInteger`` replaced by one of these, so a test sees what the graph computes on such a
CPU whatever CPU runs the test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT16 = (-(1 << 15), (1 << 15) - 1)


def pair_saturating_matmul(a: np.ndarray, w: np.ndarray, offset: int = 0) -> np.ndarray:
    """``a @ w`` as ``VPMADDUBSW`` computes it: products paired along the inner dimension
    starting at ``offset`` (0 or 1: which neighbours the kernel's packing pairs), each pair sum
    saturated to int16, the pair sums added in int64 (int32 in the kernel, which the caller's
    bound keeps exact)."""
    prods = np.asarray(a, dtype=np.int64)[..., :, :, None] * np.asarray(w, dtype=np.int64)
    k = prods.shape[-2]
    pads = [(0, 0)] * (prods.ndim - 2) + [(offset, (k + offset) % 2), (0, 0)]
    paired = np.pad(prods, pads)
    *lead, kk, n = paired.shape
    pairs = paired.reshape(*lead, kk // 2, 2, n).sum(axis=-2)
    return np.clip(pairs, *INT16).sum(axis=-2)


def quad_matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a @ w`` as a 4-product int32 dot-product instruction computes it (exactly, in int64
    here; the caller's bound keeps int32 exact)."""
    return np.asarray(a, dtype=np.int64) @ np.asarray(w, dtype=np.int64)


def run_with_kernel(model: Any, x: np.ndarray, kernel: str = "pairs",
                    offset: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """``(outputs, labels, largest)`` of an ONNX graph under onnx's reference evaluator, with every
    ``MatMulInteger`` computed by the ``kernel`` model ("pairs": :func:`pair_saturating_matmul`
    with ``offset``; "quads": :func:`quad_matmul`), results cast to int32 as the op returns;
    ``largest`` is the largest uint8 input any ``MatMulInteger`` was given."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    seen: list[np.ndarray] = []

    class MatMulInteger(OpRun):
        op_domain = ""

        def _run(self, a: np.ndarray, b: np.ndarray, a_zero_point: Any = None,
                 b_zero_point: Any = None) -> tuple[np.ndarray]:
            assert a.dtype == np.uint8 and b.dtype == np.int8
            assert a_zero_point is None and b_zero_point is None
            seen.append(a)
            got = pair_saturating_matmul(a, b, offset) if kernel == "pairs" else \
                quad_matmul(a, b)
            assert np.abs(got).max(initial=0) < 1 << 31
            return (got.astype(np.int32),)

    sess = ReferenceEvaluator(model, new_ops=[MatMulInteger])
    name = model.graph.input[0].name
    outs, labels = sess.run(["outputs", "labels"], {name: x})
    assert seen, "the graph has no MatMulInteger"
    return np.asarray(outs), np.asarray(labels), max(int(a.max(initial=0)) for a in seen)
