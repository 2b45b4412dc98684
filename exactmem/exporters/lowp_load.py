"""Loading a narrow export (docs/float-exact.md): which tensors are the narrow weight
matrices, and the exact widening of every other tensor to the activation dtype.

``exactmem export --dtype int8|bfloat16`` stores biases and tables in the narrowest dtype
that holds their values (:func:`exactmem.constructions.bounds.storage_dtype`); the network
runs them as int32 / float32 tensors with the same values (:func:`widen`), so the arithmetic
is what the claims ``int8`` and ``bfloat16-weights/float32`` certify.
"""

from __future__ import annotations

import torch

#: claim -> (dtype of the weight matrices, dtype of the activations: biases and tables widen
#: to it on load)
DTYPES: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "int8": (torch.int8, torch.int32),
    "bfloat16-weights/float32": (torch.bfloat16, torch.float32),
}


def is_weight(name: str, is_vec: bool) -> bool:
    """A weight matrix (narrow), not a bias, embedding table or position table."""
    return not is_vec and not name.endswith((".table", ".positions"))


def widen(tensors: dict[str, torch.Tensor], claim: str) -> dict[str, torch.Tensor]:
    """The tensors as the network runs them: every tensor but the weight matrices widened
    (exactly) to the activation dtype of ``claim`` (int32 / float32); a bias is the only
    one-dimensional tensor."""
    wide = DTYPES[claim][1]
    return {k: v if is_weight(k, v.dim() == 1) or v.dtype == wide else v.to(wide)
            for k, v in tensors.items()}
