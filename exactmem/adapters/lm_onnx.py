"""The ONNX graph of a certified language model (opset 17), for ``exactmem export``
(:mod:`exactmem.adapters.lm_export`; docs/trained-models.md, "Exporting a certified
language model").

Input ``tokens`` (int64 ``[batch, n]``, ``n <= context``); outputs ``logits`` ``[batch, n,
vocab]`` and ``labels`` (``ArgMax``, int64 ``[batch, n]``).  The function of
:mod:`exactmem.model.lm_spec` op for op: LayerNorm with the population variance and ``eps``
as stored (``ReduceMean``, ``Sqrt``, ``Div``; not ``LayerNormalization``, whose ``epsilon``
attribute is a float32), RMSNorm, the causal mask (``Where`` key > query gives ``-inf``),
scores divided by ``sqrt(d_head)``, ``Softmax`` over the keys, GELU tanh with the decimal
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

from exactmem.model.lm_spec import LMSpec

ERF_CLIP = 5.9


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


def _activation(g: Any, spec: LMSpec, x: str) -> str:
    if spec.activation == "relu":
        return g.op("Relu", [x])
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


def _attention(g: Any, spec: LMSpec, x: str, p: str, hidden: str) -> str:
    d, h, dh = spec.d_model, spec.heads, spec.d_head
    split = g.ints([0, 0, h, dh])
    q, k, v = (g.op("Reshape", [_affine(g, spec, x, p + "attn", slice(j * d, (j + 1) * d)),
                                split]) for j in range(3))  # [B, n, h, dh]
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [k], perm=[0, 2, 3, 1])
    s = g.op("Div", [g.op("MatMul", [q, kt]), g.scalar(math.sqrt(dh))])  # [B, h, query, key]
    s = g.op("Where", [hidden, g.scalar(-math.inf), s])
    w = g.op("Softmax", [s], axis=-1)
    o = g.op("MatMul", [w, g.op("Transpose", [v], perm=[0, 2, 1, 3])])
    o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.ints([0, 0, d])])
    return _affine(g, spec, o, p + "attn.proj")


def build_onnx(spec: LMSpec, dtype: str) -> Any:
    """The ONNX ``ModelProto`` of ``spec`` in ``dtype`` (module docstring)."""
    import onnx

    from exactmem.adapters.onnx_export import OPSET, _Graph

    g = _Graph(dtype)
    one = g.const("one", np.array(1, dtype=np.int64))
    n = g.op("Gather", [g.op("Shape", ["tokens"]), one], axis=0)
    pos = g.op("Range", [g.const("zero", np.array(0, dtype=np.int64)), n, one])
    hidden = g.op("Greater", [g.op("Unsqueeze", [pos, g.ints([0])]),
                              g.op("Unsqueeze", [pos, g.ints([1])])])  # key > query
    x = g.op("Add", [g.op("Gather", [_t(g, spec, "wte"), "tokens"], axis=0),
                     g.op("Gather", [_t(g, spec, "wpe"), pos], axis=0)])
    for i in range(spec.layers):
        p = f"h{i}."
        a = _attention(g, spec, _norm(g, spec, x, p + "ln1") if spec.norm_first else x, p,
                       hidden)
        x = g.op("Add", [x, a])
        if not spec.norm_first:
            x = _norm(g, spec, x, p + "ln1")
        f_in = _norm(g, spec, x, p + "ln2") if spec.norm_first else x
        m = _affine(g, spec, _activation(g, spec, _affine(g, spec, f_in, p + "mlp.fc")),
                    p + "mlp.proj")
        x = g.op("Add", [x, m])
        if not spec.norm_first:
            x = _norm(g, spec, x, p + "ln2")
    if spec.final_norm:
        x = _norm(g, spec, x, "lnf")
    head = spec.get("wte" if spec.tied_head else "head")
    g.nodes.append(onnx.helper.make_node(
        "MatMul", [x, g.const("head", np.ascontiguousarray(head.T.astype(g.np)))], ["logits"]))
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
