"""bfloat16 weight matrices in ONNX: the float32 graph with every MatMul weight stored as a
bfloat16 initializer and widened by a ``Cast`` to float32 (the ``bfloat16-weights/float32``
claim, docs/float-exact.md).  onnxruntime then multiplies and accumulates in float32, as the
claim certifies.  A weight that bfloat16 does not hold exactly is an error, never rounded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from exactmem.adapters import require
from exactmem.adapters.onnx_export import build_model
from exactmem.errors import NotExactError
from exactmem.model.spec import NetworkSpec


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
