"""int8 and bfloat16 weight matrices in ONNX (the claims ``int8`` and
``bfloat16-weights/float32``, docs/float-exact.md), run by onnxruntime's CPU provider.

**bfloat16**: the float32 graph with every MatMul weight stored as a bfloat16 initializer and
widened by a ``Cast`` to float32; onnxruntime then multiplies and accumulates in float32, as
the claim certifies.

**int8**: an integer graph.  Weight matrices are int8 initializers; biases, the embedding
table and every activation are int32 (``Gather``, ``Add``, ``Relu``, ``Div``, ``ReduceSum``,
``MatMul`` of activations by 0/1 masks: onnxruntime's CPU kernels for int32).  A product
``x @ W`` (int32 ``x``, int8 ``W``) is computed by ``MatMulInteger`` (ONNX opset 10: uint8
x int8 inputs, int32 accumulation) on the bytes of ``x``: ``x = P - M`` with ``P = Relu(x)``
and ``M = Relu(-x)`` (``M`` is skipped after a ReLU), ``P = sum_k 256^k P_k`` with bytes
``P_k = (P div 256^k) mod 256`` cast to uint8, and

    x @ W = sum_k 256^k (MatMulInteger(P_k, W) - MatMulInteger(M_k, W)).

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

from typing import Any

import numpy as np

from exactmem.adapters import require
from exactmem.adapters.onnx_export import _Graph, build_model
from exactmem.arith import ScaledMatrix
from exactmem.errors import NotExactError
from exactmem.model.spec import NetworkSpec

BYTES = 4  # int32 magnitudes below 2^31: four bytes


def _bf16(onnx: Any, name: str, values: np.ndarray) -> Any:
    wide = values.astype(np.float32)
    bits = wide.view(np.uint32)
    if (bits & 0xFFFF).any() or (wide.astype(np.float64) != values).any():
        raise NotExactError(f"{name}: a value that bfloat16 does not hold exactly")
    t = onnx.helper.make_tensor(name, onnx.TensorProto.BFLOAT16, list(values.shape),
                                vals=(bits >> 16).astype(np.uint16).tobytes(), raw=True)
    return t


def build_bf16_model(spec: NetworkSpec) -> Any:
    """The float32 ONNX graph of ``spec`` with its MatMul weights in bfloat16 (+ ``Cast``)."""
    onnx = require("onnx", "the ONNX export")
    from onnx import numpy_helper

    model = build_model(spec, "float32")
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    weights = {i for node in graph.node if node.op_type == "MatMul" for i in node.input
               if i in inits}
    casts = []
    for name in sorted(weights):
        values = numpy_helper.to_array(inits[name]).astype(np.float64)
        graph.initializer.remove(inits[name])
        graph.initializer.append(_bf16(onnx, name + ".bf16", values))
        casts.append(onnx.helper.make_node("Cast", [name + ".bf16"], [name],
                                           to=onnx.TensorProto.FLOAT))
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                        "exactmem.dtype": "bfloat16-weights/float32"})
    onnx.checker.check_model(model)
    return model


def _integers(m: ScaledMatrix, lo: int, hi: int, what: str, hint: str) -> np.ndarray:
    if m.den != 1 or any(not lo <= x <= hi for row in m.num for x in row):
        raise NotExactError(f"{hint}: a value that is not an {what} integer in [{lo}, {hi}]")
    return np.array(m.num, dtype=np.int64).reshape(m.shape)


class _Int8Graph(_Graph):
    """The graph of :mod:`.onnx_export` with int8 weight matrices and int32 everything else;
    products by ``MatMulInteger`` on the bytes of the activations (module docstring)."""

    def __init__(self) -> None:
        super().__init__("float32")
        self.np = np.int32
        self.elem = self.onnx.TensorProto.INT32
        self.dtype = "int8"
        self.floating = False
        self.scalars: dict[int, str] = {}

    def weight(self, hint: str, m: ScaledMatrix, transpose: bool = True) -> str:
        a = _integers(m, -128, 127, "int8", hint)
        return self.const(hint, np.ascontiguousarray((a.T if transpose else a).astype(np.int8)))

    def table(self, hint: str, m: ScaledMatrix) -> str:
        a = _integers(m, -(1 << 31), (1 << 31) - 1, "int32", hint)
        return self.const(hint, np.ascontiguousarray(a.T.astype(np.int32)))

    def vector(self, hint: str, m: ScaledMatrix) -> str:
        a = _integers(m, -(1 << 31), (1 << 31) - 1, "int32", hint)
        return self.const(hint, a.reshape(-1).astype(np.int32))

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
        for p, how in parts:
            for k in range(BYTES):
                shifted = self.op("Div", [p, self.scalar(256 ** k)]) if k else p
                byte = self.op("Cast", [self.op("Mod", [shifted, self.scalar(256)])],
                               to=self.onnx.TensorProto.UINT8)
                y = self.op("MatMulInteger", [byte, w])
                if k:
                    y = self.op("Mul", [y, self.scalar(256 ** k)])
                total = (y if how == "Add" else self.op("Neg", [y])) if total is None \
                    else self.op(how, [total, y])
        assert total is not None
        return total


def build_int8_model(spec: NetworkSpec, doc: dict[str, str] | None = None) -> Any:
    """The integer ONNX graph of ``spec`` (module docstring): int8 weight matrices,
    ``MatMulInteger`` with int32 accumulation, int32 biases, table and activations."""
    require("onnx", "the ONNX export")
    return build_model(spec, "int8", doc, graph=_Int8Graph())
