"""int8 and bfloat16 weight matrices in ONNX (the claims ``int8`` and
``bfloat16-weights/float32``, docs/float-exact.md), run by onnxruntime's CPU provider.

Biases and the embedding and position tables are stored in the narrowest dtype that holds
all their values (:func:`exactmem.constructions.bounds.storage_dtype`, the rule ``exactmem
info`` charges) and widened by a ``Cast`` to the activation dtype: the arithmetic is that of
int32 / float32 tensors with the same values.

**bfloat16**: the float32 graph with every MatMul weight stored as a bfloat16 initializer and
widened by a ``Cast`` to float32 (biases and tables too where every value is a zero or normal
bfloat16 number, else float32); onnxruntime then multiplies and accumulates in float32, as
the claim certifies.

**int8**: an integer graph.  Weight matrices are int8 initializers; biases and tables int8,
int16 or int32, every activation int32 (``Gather``, ``Add``, ``Relu``, ``Div``, ``ReduceSum``,
``MatMul`` of activations by 0/1 masks: onnxruntime's CPU kernels for int32).  A product
``x @ W`` (int32 ``x``, int8 ``W``) is computed by ``MatMulInteger`` (ONNX opset 10: uint8
x int8 inputs, int32 accumulation) on **7-bit limbs** of ``x``: ``x = P - M`` with
``P = Relu(x)`` and ``M = Relu(-x)`` (``M`` is skipped after a ReLU),
``P = sum_k 128^k P_k`` with limbs ``P_k = (P div 128^k) mod 128`` (``LIMBS`` = 5 of them
hold every ``|x| < 2^31``) cast to uint8, and

    x @ W = sum_k 128^k (MatMulInteger(P_k, W) - MatMulInteger(M_k, W)).

The integer execution model (docs/float-exact.md) is what this buys.  Every uint8 input of a
``MatMulInteger`` is at most 127, so any two of its products add to at most
``2 * 127 * 128 = 32,512 < 2^15`` in magnitude (:data:`PAIR_BOUND`): a kernel that adds
adjacent pairs of u8 x s8 products in a *saturating int16* register before widening (x86
AVX2 ``VPMADDUBSW``, onnxruntime's u8s8 kernel on CPUs without VNNI) never saturates, and
kernels that add 4 products into int32 (AVX-VNNI / AVX-512 VNNI ``VPDPBUSD``, Arm
``SDOT``/``UDOT``/``USDOT``) or widen each product first (Arm ``UMULL``/``SMULL``) are covered
by the int32 rule.  Full bytes would not be: ``2 * 255 * 128 = 65,280`` overflows int16.
Every partial sum -- inside a ``MatMulInteger``, after each scaling, after each addition,
with the bias -- is at most ``|b| + sum_i |x_i| |w_i|`` in magnitude (each term is a part of
some ``|x_i| |w_i|``), which the ``int8`` claim bounds below ``2^31``: nothing overflows, in
any accumulation order, and the graph computes the exact value the checker replayed.
Attention divides sums of values by key counts with integer ``Div``; the claim makes those
quotients integers, so truncation changes nothing.  Softmax and causal scored attention
have no integer graph (the claim excludes softmax).  The output ``outputs`` is int32, the
label of a scalar readout is that value cast to int64 (no rounding).

A weight that does not fit its format is an error, never rounded.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.constructions.bounds import bf16_exact, storage_dtype
from exactmem.errors import NotExactError
from exactmem.exporters.onnx_export import _Graph, build_model
from exactmem.model.spec import NetworkSpec
from exactmem.optional import require

#: bits of one activation limb fed to ``MatMulInteger`` (module docstring): 7, not 8, so that
#: a pair of u8 x s8 products stays inside int16
LIMB_BITS = 7
#: limbs of an int32 magnitude below 2^31 (5 x 7 = 35 bits)
LIMBS = -(-31 // LIMB_BITS)
#: the largest magnitude of two limb x int8 products: 2 * 127 * 128 = 32,512 <= 2^15 - 1
PAIR_BOUND = 2 * ((1 << LIMB_BITS) - 1) * 128
assert PAIR_BOUND < 1 << 15


BF16 = "bfloat16-weights/float32"


def _bf16(onnx: Any, name: str, m: ScaledMatrix, transpose: bool) -> Any:
    if any(not bf16_exact(x, m.den) for row in m.num for x in row):
        raise NotExactError(f"{name}: a value that bfloat16 does not hold exactly")
    values = np.array([float(Fraction(x, m.den)) for row in m.num for x in row],
                      dtype=np.float32).reshape(m.shape)
    bits = np.ascontiguousarray(values.T if transpose else values).view(np.uint32)
    return onnx.helper.make_tensor(name, onnx.TensorProto.BFLOAT16, list(bits.shape),
                                   vals=(bits >> 16).astype(np.uint16).tobytes(), raw=True)


class _Bf16Graph(_Graph):
    """The float32 graph of :mod:`.onnx_export` with bfloat16 weight matrices, and biases and
    tables in :func:`storage_dtype`, each widened by a ``Cast`` to float32."""

    def __init__(self) -> None:
        super().__init__("float32")

    def _cast(self, hint: str, m: ScaledMatrix, transpose: bool) -> str:
        name = self.name(hint) + ".bf16"
        self.inits.append(_bf16(self.onnx, name, m, transpose))
        return self.op("Cast", [name], to=self.onnx.TensorProto.FLOAT)

    def weight(self, hint: str, m: ScaledMatrix, transpose: bool = True) -> str:
        return self._cast(hint, m, transpose)

    def table(self, hint: str, m: ScaledMatrix) -> str:
        if storage_dtype(BF16, m, weight=False) == "bfloat16":
            return self._cast(hint, m, True)
        return super().weight(hint, m)

    def vector(self, hint: str, m: ScaledMatrix) -> str:
        if storage_dtype(BF16, m, weight=False) == "bfloat16":
            return self.op("Reshape", [self._cast(hint, m, False), self.ints([-1])])
        return super().vector(hint, m)


def build_bf16_model(spec: NetworkSpec) -> Any:
    """The float32 ONNX graph of ``spec`` with its MatMul weights in bfloat16, its biases and
    tables in bfloat16 or float32 (:func:`storage_dtype`), each bfloat16 one ``Cast``."""
    onnx = require("onnx", "the ONNX export")
    model = build_model(spec, "float32", graph=_Bf16Graph())
    onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                        "exactmem.dtype": BF16})
    onnx.checker.check_model(model)
    return model


def _integers(m: ScaledMatrix, lo: int, hi: int, what: str, hint: str) -> np.ndarray:
    if m.den != 1 or any(not lo <= x <= hi for row in m.num for x in row):
        raise NotExactError(f"{hint}: a value that is not an {what} integer in [{lo}, {hi}]")
    return np.array(m.num, dtype=np.int64).reshape(m.shape)


class _Int8Graph(_Graph):
    """The graph of :mod:`.onnx_export` with int8 weight matrices and int32 everything else;
    products by ``MatMulInteger`` on 7-bit limbs of the activations (module docstring)."""

    def __init__(self, limb_bits: int = LIMB_BITS) -> None:
        super().__init__("float32")
        self.limb_bits = limb_bits
        self.np = np.int32
        self.elem = self.onnx.TensorProto.INT32
        self.dtype = "int8"
        self.floating = False
        self.scalars: dict[int, str] = {}

    def weight(self, hint: str, m: ScaledMatrix, transpose: bool = True) -> str:
        a = _integers(m, -128, 127, "int8", hint)
        return self.const(hint, np.ascontiguousarray((a.T if transpose else a).astype(np.int8)))

    def _stored(self, hint: str, m: ScaledMatrix, a: np.ndarray) -> str:
        """``a`` stored in :func:`storage_dtype` and, if narrower, ``Cast`` to int32."""
        dt = storage_dtype("int8", m, weight=False)
        name = self.const(hint, np.ascontiguousarray(a.astype(dt)))
        return name if dt == "int32" else self.op("Cast", [name], to=self.elem)

    def table(self, hint: str, m: ScaledMatrix) -> str:
        a = _integers(m, -(1 << 31), (1 << 31) - 1, "int32", hint)
        return self._stored(hint, m, a.T)

    def vector(self, hint: str, m: ScaledMatrix) -> str:
        a = _integers(m, -(1 << 31), (1 << 31) - 1, "int32", hint)
        return self._stored(hint, m, a.reshape(-1))

    def scalar(self, value: float) -> str:
        if value != int(value):
            raise NotExactError(f"{value}: not an integer constant")
        if int(value) not in self.scalars:
            self.scalars[int(value)] = self.const("c", np.array(int(value), dtype=np.int32))
        return self.scalars[int(value)]

    def matmul(self, x: str, m: ScaledMatrix, nonneg: bool = False) -> str:
        w = self.weight("W", m)
        parts = [(x, "Add")] if nonneg else [(self.op("Relu", [x]), "Add"),
                                              (self.op("Relu", [self.op("Neg", [x])]), "Sub")]
        total: str | None = None
        base = 1 << self.limb_bits
        for p, how in parts:
            for k in range(-(-31 // self.limb_bits)):
                shifted = self.op("Div", [p, self.scalar(base ** k)]) if k else p
                limb = self.op("Cast", [self.op("Mod", [shifted, self.scalar(base)])],
                               to=self.onnx.TensorProto.UINT8)
                y = self.op("MatMulInteger", [limb, w])
                if k:
                    y = self.op("Mul", [y, self.scalar(base ** k)])
                total = (y if how == "Add" else self.op("Neg", [y])) if total is None \
                    else self.op(how, [total, y])
        assert total is not None
        return total


def build_int8_model(spec: NetworkSpec, doc: dict[str, str] | None = None,
                     limb_bits: int = LIMB_BITS) -> Any:
    """The integer ONNX graph of ``spec`` (module docstring): int8 weight matrices,
    ``MatMulInteger`` on ``limb_bits``-bit activation limbs with int32 accumulation, int32
    biases, table and activations.  ``limb_bits`` other than 7 is for tests only: with 8-bit
    limbs a saturating int16 pair kernel can return wrong sums."""
    require("onnx", "the ONNX export")
    if not 1 <= limb_bits <= 8:
        raise ValueError(f"limb_bits: expected 1 to 8, found {limb_bits}")
    return build_model(spec, "int8", doc, graph=_Int8Graph(limb_bits))
