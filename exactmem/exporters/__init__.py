"""Exporters: the certified network in the float formats users load, and the runs of those
files in their own runtimes.

* :mod:`exactmem.exporters.skeleton`: the structure without the weights (export layout);
* :mod:`exactmem.exporters.torch`: ``to_torch`` / ``from_torch``;
* :mod:`exactmem.exporters.safetensors_io`: safetensors files bound to the certificate;
* :mod:`exactmem.exporters.onnx_export`: an ONNX graph of MatMul/Softmax-level primitives;
* :mod:`exactmem.exporters.lowp`, :mod:`~exactmem.exporters.lowp_load`,
  :mod:`~exactmem.exporters.lowp_onnx`: int8 and bfloat16 weight matrices;
* :mod:`exactmem.exporters.runtimes`: run a written file and count what it memorizes.

Import the submodule you need; importing this package loads neither torch nor onnx.  torch,
safetensors, onnx and onnxruntime come with the ``export`` extra; a missing one is
:func:`exactmem.optional.missing`'s error, naming the extra.
"""
