"""Adapters: the certified network in the float formats users load, and how well it survives.

* :mod:`exactmem.adapters.torch`: ``to_torch`` / ``from_torch`` (the only torch import);
* :mod:`exactmem.adapters.safetensors_io`: safetensors files bound to the certificate;
* :mod:`exactmem.adapters.onnx_export`: an ONNX graph of MatMul/Softmax-level primitives;
* :mod:`exactmem.adapters.mpfr_eval`: the forward pass in ``p``-bit floating point (MPFR);
* :mod:`exactmem.adapters.precision`: the float fidelity report and minimal mantissa bits.

Import the submodule you need; importing this package loads neither torch nor onnx.
"""
