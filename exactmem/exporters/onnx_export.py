"""ONNX export: the network as MatMul / Softmax-level primitives (opset 17).

Graph interface:

* input ``tokens`` (int64, ``[batch, n]``) for token-id networks, or ``inputs`` (float,
  ``[batch, n, d]``) for vector networks;
* output ``outputs`` (float, ``[batch, n, d_out]``): the raw network output at every
  position, before the readout;
* output ``labels`` (int64): ``[batch]`` for one read position (next-token), ``[batch, n]``
  for every position (seq2seq); nearest integer (``Round``, ties to even) of a scalar output,
  ``ArgMax`` of class scores.

Layers follow :mod:`exactmem.exporters.torch` op for op: embedding = ``Gather`` of the
transposed table; affine = ``MatMul`` then ``Add``; attention scores ``K Q^T`` with keys on
rows (Kajitsuka & Sato eq. 2); hardmax = ``Equal(S, ReduceMax(S))`` as a 0/1 mask, the masked
sum of values divided by the number of ties (the exact-in-float form of a uniform split over
tied maxima); uniform attention = ``ReduceSum`` of the values divided by the number of keys;
softmax = ``Softmax`` over the key axis.  Positional embeddings are added after the
``Gather``; attention biases are the ``Add`` of the affine maps; a score scale is a ``Mul``
of the scores; a causal mask adds ``-inf`` to the hidden scores (uniform heads: a constant
0/1 matrix and the per-query key count).  Graph metadata holds the network structure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.exporters.skeleton import skeleton
from exactmem.floats.formats import FORMATS, rounded_values
from exactmem.model.spec import Attention, Embedding, FeedForward, Linear, NetworkSpec

OPSET = 17
NP_DTYPES = {"float64": np.float64, "float32": np.float32}


class GraphCore:
    """An ONNX graph under construction in ``dtype`` (float64 or float32): initializers and
    nodes, each output named ``<hint>_<count>`` (shared by the language-model graph)."""

    def __init__(self, dtype: str) -> None:
        import onnx

        self.onnx = onnx
        self.np: Any = NP_DTYPES[dtype]
        self.elem = onnx.TensorProto.DOUBLE if dtype == "float64" else onnx.TensorProto.FLOAT
        self.dtype = dtype
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, arr: np.ndarray) -> str:
        n = self.name(hint)
        self.inits.append(self.onnx.numpy_helper.from_array(arr, n))
        return n

    def op(self, kind: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(kind.lower())
        self.nodes.append(self.onnx.helper.make_node(kind, inputs, [out], **attrs))
        return out


class _Graph(GraphCore):
    def __init__(self, dtype: str) -> None:
        super().__init__(dtype)
        self.fmt = FORMATS[dtype]
        self.floating = True  # False: an integer graph (:mod:`.lowp_onnx`)

    def weight(self, hint: str, m: ScaledMatrix, transpose: bool = True) -> str:
        a = np.array(rounded_values(m, self.fmt), dtype=np.float64).reshape(m.shape)
        return self.const(hint, np.ascontiguousarray((a.T if transpose else a).astype(self.np)))

    def table(self, hint: str, m: ScaledMatrix) -> str:
        """An embedding or position table (read by index, never multiplied)."""
        return self.weight(hint, m)

    def matmul(self, x: str, m: ScaledMatrix, nonneg: bool = False) -> str:
        """``x @ W.T``; ``nonneg``: ``x`` is a ReLU output (a hint integer graphs use)."""
        return self.op("MatMul", [x, self.weight("W", m)])

    def vector(self, hint: str, m: ScaledMatrix) -> str:
        a = np.array(rounded_values(m, self.fmt), dtype=np.float64).reshape(-1)
        return self.const(hint, a.astype(self.np))

    def scalar(self, value: float) -> str:
        return self.const("c", np.array(value, dtype=self.np))

    def ints(self, values: list[int]) -> str:
        return self.const("idx", np.array(values, dtype=np.int64))


def _affine(g: _Graph, x: str, weight: ScaledMatrix, bias: ScaledMatrix | None,
            nonneg: bool = False) -> str:
    y = g.matmul(x, weight, nonneg)
    return g.op("Add", [y, g.vector("b", bias)]) if bias is not None else y


def _attention(g: _Graph, x: str, att: Attention, n: int) -> str:
    xk = g.op("Gather", [x, g.ints(list(att.keys))], axis=1) if att.keys is not None else x
    keys = list(att.keys) if att.keys is not None else list(range(n))
    allowed = np.array([[not att.causal or k <= j for j in range(n)] for k in keys])
    # additive mask: 0 where query j sees key k, -inf where the causal mask hides it
    if att.causal and not g.floating and att.kind != "uniform":
        raise SpecError("a causal scored attention layer has no integer ONNX graph")
    neg = g.const("mask", np.where(allowed, 0.0, -np.inf).astype(g.np)[None]) \
        if att.causal else None
    total: str | None = None
    for head in att.heads:
        v = _affine(g, xk, head.value, head.value_bias)  # [B, K, s]
        if (att.kind == "uniform" or head.scores_are_zero()) and att.causal:
            m01 = g.const("allowed", allowed.T.astype(g.np)[None])  # [1, n, K]
            cnt = g.const("count", allowed.sum(axis=0).astype(g.np)[None, :, None])
            agg = g.op("Div", [g.op("MatMul", [m01, v]), cnt])
        elif att.kind == "uniform" or head.scores_are_zero():
            s = g.op("ReduceSum", [v, g.ints([1])], keepdims=1)
            nk = (len(att.keys) if att.keys is not None else None)
            if nk is None:
                shape = g.op("Shape", [xk])
                cnt = g.op("Cast", [g.op("Gather", [shape, g.ints([1])], axis=0)], to=g.elem)
                agg = g.op("Div", [s, cnt])
            else:
                agg = g.op("Div", [s, g.scalar(float(nk))])
        else:
            q = _affine(g, x, head.query, head.query_bias)
            k = _affine(g, xk, head.key, head.key_bias)
            scores = g.op("MatMul", [k, g.op("Transpose", [q], perm=[0, 2, 1])])  # [B, K, n]
            if head.scale != 1:
                scores = g.op("Mul", [scores, g.scalar(float(head.scale))])
            if neg is not None:
                scores = g.op("Add", [scores, neg])
            if att.kind == "softmax":
                if not g.floating:
                    raise SpecError("softmax attention has no integer ONNX graph")
                w = g.op("Softmax", [scores], axis=1)
                agg = g.op("MatMul", [g.op("Transpose", [w], perm=[0, 2, 1]), v])
            else:
                best = g.op("ReduceMax", [scores], axes=[1], keepdims=1)
                mask = g.op("Cast", [g.op("Equal", [scores, best])], to=g.elem)
                cnt = g.op("ReduceSum", [mask, g.ints([1])], keepdims=1)  # [B, 1, n]
                summed = g.op("MatMul", [g.op("Transpose", [mask], perm=[0, 2, 1]), v])
                agg = g.op("Div", [summed, g.op("Transpose", [cnt], perm=[0, 2, 1])])
        out = _affine(g, agg, head.output, head.output_bias)
        total = out if total is None else g.op("Add", [total, out])
    assert total is not None
    if att.residual:
        return g.op("Add", [x, total])
    return g.op("Add", [g.op("Mul", [x, g.scalar(0.0)]), total])  # broadcast to [B, n, m]


def build_model(spec: NetworkSpec, dtype: str = "float64", doc: dict[str, str] | None = None,
                graph: _Graph | None = None) -> Any:
    """The ONNX ``ModelProto`` of ``spec`` with weights rounded once into ``dtype`` (or built
    by ``graph``, a :class:`_Graph` of another element type: :mod:`.lowp_onnx`)."""
    from exactmem.optional import require

    onnx = require("onnx", "the ONNX export")
    if graph is None and dtype not in NP_DTYPES:
        raise SpecError(f"ONNX export supports {sorted(NP_DTYPES)}, found {dtype!r}")
    g = graph if graph is not None else _Graph(dtype)
    n = spec.seq_len
    if spec.input_kind == "token-ids":
        inp = onnx.helper.make_tensor_value_info("tokens", onnx.TensorProto.INT64, ["batch", n])
    else:
        inp = onnx.helper.make_tensor_value_info("inputs", g.elem, ["batch", n, spec.input_dim])
    x = inp.name
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            x = g.op("Gather", [g.table("table", layer.table), x], axis=0)
            if layer.positions is not None:  # [n, d], broadcast over the batch
                x = g.op("Add", [x, g.table("positions", layer.positions)])
        elif isinstance(layer, Linear):
            x = _affine(g, x, layer.map.weight, layer.map.bias)
        elif isinstance(layer, FeedForward):
            y = x
            for j, aff in enumerate(layer.layers):
                if j > 0:
                    y = g.op("Relu", [y])
                y = _affine(g, y, aff.weight, aff.bias, nonneg=j > 0)
            x = g.op("Add", [x, y]) if layer.residual else y
        else:
            x = _attention(g, x, layer, n)
    g.nodes.append(onnx.helper.make_node("Identity", [x], ["outputs"]))
    pos = list(spec.read_positions())
    if spec.readout.positions == "every":
        sel = g.op("Gather", ["outputs", g.ints(pos)], axis=1)  # [B, n, d]
    else:
        sel = g.op("Gather", ["outputs", g.const("pos", np.array(pos[0], dtype=np.int64))],
                   axis=1)  # [B, d]
    if spec.readout.kind == "scalar":
        val = g.op("Squeeze", [sel, g.ints([-1])])
        lab = g.op("Cast", [g.op("Round", [val]) if g.floating else val],
                   to=onnx.TensorProto.INT64)
    else:
        lab = g.op("ArgMax", [sel], axis=-1, keepdims=0)
    g.nodes.append(onnx.helper.make_node("Identity", [lab], ["labels"]))
    out_shape: list[Any] = ["batch", n, spec.out_dim]
    lab_shape: list[Any] = ["batch", n] if spec.readout.positions == "every" else ["batch"]
    graph = onnx.helper.make_graph(
        g.nodes, "exactmem", [inp],
        [onnx.helper.make_tensor_value_info("outputs", g.elem, out_shape),
         onnx.helper.make_tensor_value_info("labels", onnx.TensorProto.INT64, lab_shape)],
        g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="exactmem")
    model.ir_version = 8
    meta = {"exactmem.skeleton": json.dumps(skeleton(spec), sort_keys=True),
            "exactmem.dtype": g.dtype, **(doc or {})}
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    return model


def write_onnx(spec: NetworkSpec, out: str | Path, dtype: str = "float64",
               doc: dict[str, str] | None = None) -> Path:
    """Write the graph of ``spec`` to ``out`` (atomically, :mod:`exactmem.files.atomic`)."""
    from exactmem.optional import require

    onnx = require("onnx", "the ONNX export")
    from exactmem.files.atomic import atomic_path

    out = Path(out)
    model = build_model(spec, dtype, doc)
    with atomic_path(out) as tmp:
        onnx.save_model(model, str(tmp))
    return out


def run_onnx(path_or_model: str | Path | Any, inputs: np.ndarray,
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(outputs, labels)`` from onnxruntime on CPU."""
    from exactmem.optional import require

    ort = require("onnxruntime", "running an ONNX graph")
    src = str(path_or_model) if isinstance(path_or_model, (str, Path)) else \
        path_or_model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    outs, labels = sess.run(["outputs", "labels"], {name: inputs})
    return np.asarray(outs), np.asarray(labels)


def dataset_array(ds: Any, dtype: str = "float64") -> np.ndarray:
    """The dataset as the graph's input array (vectors rounded once into ``dtype``)."""
    if ds.inputs == "token-ids":
        return np.array(ds.sequences, dtype=np.int64)
    if dtype == "int8":  # the integer graph: int32 inputs, exactly
        from fractions import Fraction

        vals = [[[Fraction(v) for v in tok] for tok in seq] for seq in ds.sequences]
        if any(v.denominator != 1 or abs(v) >= 1 << 31 for s in vals for t in s for v in t):
            raise SpecError("the int8 graph takes integer inputs below 2^31")
        return np.array([[[int(v) for v in t] for t in s] for s in vals], dtype=np.int32)
    fmt = FORMATS[dtype]
    rows = [[rounded_values(ScaledMatrix.row(list(tok)), fmt)[0] for tok in seq]
            for seq in ds.sequences]
    return np.array(rows, dtype=np.float64).astype(NP_DTYPES[dtype])
