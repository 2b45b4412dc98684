"""The ONNX graph of a certified language model (opset 17), for ``exactmem export``
(:mod:`exactmem.lm.exporting`; docs/trained-models.md, "Exporting a certified
language model").

Input ``tokens`` (int64 ``[batch, n]``, ``n <= context``); outputs ``logits`` ``[batch, n,
vocab]`` and ``labels`` (``ArgMax``, int64 ``[batch, n]``).  The function of
:mod:`exactmem.lm.decoder` op for op: LayerNorm with the population variance and ``eps``
as stored (``ReduceMean``, ``Sqrt``, ``Div``; not ``LayerNormalization``, whose ``epsilon``
attribute is a float32), RMSNorm, the causal mask (``Where`` key > query gives ``-inf``),
scores divided by ``sqrt(d_head)`` (or as ``spec.score_divisor`` says), rotary positions
from constant cos/sin tables of the context gathered at the positions, grouped-query heads by
``Gather`` of the key/value heads, ``Softmax`` over the keys, GELU tanh with the decimal
``0.044715`` and ``sqrt(2/pi)`` as constants, GELU erf with the ``Erf`` op in float32.
onnxruntime has no float64 ``Erf``, so the float64 graph sums erf's series of positive terms
``erf(z) = 2/sqrt(pi) exp(-z^2) z (1 + 2z^2/3 (1 + 2z^2/5 (1 + ...)))`` (``z`` clipped to
``|z| <= 5.9``, where ``erfc < 2^-53``), within a few ulps of ``math.erf``.  (Written as a
nest of ``1 + c y (...)`` on purpose: onnxruntime's graph optimizer mis-evaluates a Horner
chain whose float64 coefficients fall below float32's range.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from exactmem.exporters.onnx_export import GraphCore
from exactmem.lm.block import Ops, forward
from exactmem.lm.decoder import INV_FREQ, LMSpec, layer_of

ERF_CLIP = 5.9
OPSET = 17


def _erf64(g: Any, z: str) -> str:
    """erf of float64 ``z`` by its series of positive terms (module docstring)."""
    z = g.op("Clip", [z, g.scalar(-ERF_CLIP), g.scalar(ERF_CLIP)])
    y = g.op("Mul", [z, z])
    y2 = g.op("Mul", [y, g.scalar(2.0)])
    k, term, total = 0, ERF_CLIP, ERF_CLIP
    while term > total * 2.0 ** -56:
        k += 1
        term *= 2 * ERF_CLIP ** 2 / (2 * k + 1)
        total += term
    acc = g.scalar(1.0)
    for j in range(k, 0, -1):  # nested: 1 + 2y/3 (1 + 2y/5 (1 + ... (1 + 2y/(2k+1))))
        acc = g.op("Add", [g.scalar(1.0), g.op("Div", [g.op("Mul", [acc, y2]),
                                                      g.scalar(float(2 * j + 1))])])
    front = g.op("Mul", [g.op("Exp", [g.op("Neg", [y])]), g.scalar(2 / math.sqrt(math.pi))])
    erf = g.op("Mul", [g.op("Mul", [front, z]), acc])
    return g.op("Clip", [erf, g.scalar(-1.0), g.scalar(1.0)])


class Graph(GraphCore):
    """The exporter's graph core (:class:`exactmem.exporters.onnx_export.GraphCore`) with
    the scalar and index constants the decoder's graph reads."""

    def scalar(self, value: float) -> str:
        return self.const("c", np.array(value, dtype=self.np))

    def ints(self, values: list[int]) -> str:
        return self.const("idx", np.array(values, dtype=np.int64))


class OnnxOps(Ops[str]):
    """The block's operations as ONNX nodes: a value is the name of a node's output."""

    def __init__(self, spec: LMSpec, g: Graph, hidden: str, pos: str = "") -> None:
        self.spec, self.g, self.hidden, self.pos = spec, g, hidden, pos
        self.tables: tuple[str, str] | None = None

    def norm(self, x: str, name: str) -> str:
        return _norm(self.g, self.spec, x, name)

    def linear(self, x: str, name: str) -> str:
        return _affine(self.g, self.spec, x, name)

    def attention(self, x: str, name: str) -> str:
        if self.spec.rotary_dims and self.tables is None:
            self.tables = _rotary_tables(self.g, self.spec, self.pos)
        return _attention(self.g, self.spec, x, name, self.hidden, self.tables)

    def activation(self, x: str) -> str:
        return _activation(self.g, self.spec, x)

    def product(self, a: str, b: str) -> str:
        return self.g.op("Mul", [a, b])

    def residual(self, x: str, h: str, name: str) -> str:
        return self.g.op("Add", [x, _affine(self.g, self.spec, h, name)])

    def head(self, x: str) -> str:
        """``x head^T`` as the graph output ``logits``."""
        g = self.g
        head = self.spec.get("wte" if self.spec.tied_head else "head")
        g.nodes.append(g.onnx.helper.make_node(
            "MatMul", [x, g.const("head", np.ascontiguousarray(head.T.astype(g.np)))],
            ["logits"]))
        return "logits"


def _activation(g: Any, spec: LMSpec, x: str) -> str:
    if spec.activation == "relu":
        return g.op("Relu", [x])
    if spec.activation == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])])
    if spec.activation == "gelu_tanh":
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        inner = g.op("Add", [x, g.op("Mul", [g.scalar(0.044715), cube])])
        t = g.op("Tanh", [g.op("Mul", [g.scalar(math.sqrt(2 / math.pi)), inner])])
    else:
        z = g.op("Div", [x, g.scalar(math.sqrt(2))])
        t = g.op("Erf", [z]) if g.dtype == "float32" else _erf64(g, z)
    return g.op("Mul", [g.op("Mul", [g.scalar(0.5), x]), g.op("Add", [g.scalar(1.0), t])])


def _norm(g: Any, spec: LMSpec, x: str, name: str) -> str:
    eps = g.scalar(spec.layer_norm_eps)
    if spec.norm == "rmsnorm":
        c = x
        ms = g.op("ReduceMean", [g.op("Mul", [x, x])], axes=[-1], keepdims=1)
    else:
        c = g.op("Sub", [x, g.op("ReduceMean", [x], axes=[-1], keepdims=1)])
        ms = g.op("ReduceMean", [g.op("Mul", [c, c])], axes=[-1], keepdims=1)
    y = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [ms, eps])])])
    y = g.op("Mul", [y, _t(g, spec, name + ".weight")])
    return g.op("Add", [y, _t(g, spec, name + ".bias")])


def _t(g: Any, spec: LMSpec, name: str, part: slice | None = None) -> str:
    a = spec.get(name)
    if part is not None:
        a = a[..., part]
    return g.const(name.replace(".", "_"), np.ascontiguousarray(a.astype(g.np)))


def _affine(g: Any, spec: LMSpec, x: str, name: str, part: slice | None = None) -> str:
    y = g.op("MatMul", [x, _t(g, spec, name + ".weight", part)])
    return g.op("Add", [y, _t(g, spec, name + ".bias", part)])


def _rotary_tables(g: Any, spec: LMSpec, pos: str) -> tuple[str, str]:
    """``cos(p omega_j)``, ``sin(p omega_j)`` ``[n, r/2]`` as constants of the whole context
    (numpy's float64 cos and sin of the exact angle, in the graph's dtype), gathered at the
    positions ``pos``."""
    angle = np.arange(spec.context, dtype=np.float64)[:, None] * spec.get(INV_FREQ)[None, :]
    return (g.op("Gather", [g.const("rope_cos", np.cos(angle).astype(g.np)), pos], axis=0),
            g.op("Gather", [g.const("rope_sin", np.sin(angle).astype(g.np)), pos], axis=0))


def _rotate(g: Any, spec: LMSpec, q: str, tables: tuple[str, str]) -> str:
    """Rotary positions on ``q [B, n, h, dh]`` (``rotate_half`` pairs ``j, j + r/2``)."""
    half, dh = spec.rotary_dims // 2, spec.d_head
    c, s = (g.op("Unsqueeze", [t, g.ints([1])]) for t in tables)  # [n, 1, r/2]
    def part(lo: int, hi: int) -> str:
        return g.op("Slice", [q, g.ints([lo]), g.ints([hi]), g.ints([-1])])

    a, b = part(0, half), part(half, 2 * half)
    lo = g.op("Sub", [g.op("Mul", [a, c]), g.op("Mul", [b, s])])
    hi = g.op("Add", [g.op("Mul", [b, c]), g.op("Mul", [a, s])])
    rest = [part(2 * half, dh)] if dh > 2 * half else []
    return g.op("Concat", [lo, hi, *rest], axis=-1)


def _attention(g: Any, spec: LMSpec, x: str, name: str, hidden: str,
               tables: tuple[str, str] | None = None) -> str:
    """Causal multi-head attention without the output projection (rotary positions from
    ``tables``, grouped-query heads, the scores' divisor of the block)."""
    d, h, dh, kv = spec.d_model, spec.heads, spec.d_head, spec.n_kv
    widths = (0, d, d + kv * dh, d + 2 * kv * dh)
    q, k, v = (g.op("Reshape", [_affine(g, spec, x, name, slice(widths[j], widths[j + 1])),
                                g.ints([0, 0, -1, dh])]) for j in range(3))  # [B, n, h, dh]
    if tables is not None:
        q, k = _rotate(g, spec, q, tables), _rotate(g, spec, k, tables)
    if kv != h:
        heads = g.ints([j // (h // kv) for j in range(h)])
        k, v = g.op("Gather", [k, heads], axis=2), g.op("Gather", [v, heads], axis=2)
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [k], perm=[0, 2, 3, 1])
    a_, b_ = spec.score_divisor(layer_of(name))
    s = g.op("Div", [g.op("MatMul", [q, kt]),
                     g.scalar(math.sqrt(a_) * b_)])  # [B, h, query, key]
    s = g.op("Where", [hidden, g.scalar(-math.inf), s])
    w = g.op("Softmax", [s], axis=-1)
    o = g.op("MatMul", [w, g.op("Transpose", [v], perm=[0, 2, 1, 3])])
    return g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.ints([0, 0, d])])


def build_onnx(spec: LMSpec, dtype: str) -> Any:
    """The ONNX ``ModelProto`` of ``spec`` in ``dtype`` (module docstring)."""
    import onnx

    g = Graph(dtype)
    one = g.const("one", np.array(1, dtype=np.int64))
    n = g.op("Gather", [g.op("Shape", ["tokens"]), one], axis=0)
    pos = g.op("Range", [g.const("zero", np.array(0, dtype=np.int64)), n, one])
    hidden = g.op("Greater", [g.op("Unsqueeze", [pos, g.ints([0])]),
                              g.op("Unsqueeze", [pos, g.ints([1])])])  # key > query
    x = g.op("Gather", [_t(g, spec, "wte"), "tokens"], axis=0)
    if not spec.rotary_dims:
        x = g.op("Add", [x, g.op("Gather", [_t(g, spec, "wpe"), pos], axis=0)])
    forward(OnnxOps(spec, g, hidden, pos), x)
    g.nodes.append(onnx.helper.make_node("ArgMax", ["logits"], ["labels"], axis=-1,
                                         keepdims=0))
    i64 = onnx.TensorProto.INT64
    graph = onnx.helper.make_graph(
        g.nodes, "exactmem-lm",
        [onnx.helper.make_tensor_value_info("tokens", i64, ["batch", "n"])],
        [onnx.helper.make_tensor_value_info("logits", g.elem,
                                            ["batch", "n", spec.vocab_size]),
         onnx.helper.make_tensor_value_info("labels", i64, ["batch", "n"])], g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="exactmem")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
