"""Dense bfloat16-weight memorizer: :mod:`.dense_float32` with 8-bit words.

The layout of :mod:`.dense_float32` with words below ``2^8`` (``floor(8 / b)`` fields of
``b`` label bits), the word-layer gate ``2^8`` and every table coordinate below 128.  Every
entry of every weight *matrix* is then a bfloat16 value (at most 8 significant bits): the
words (``< 2^8``), the gate and the peeling steps (powers of two), the one-hot coefficients
``2 u <= 254`` and the attention and pass-through entries (0 and 1).

**Claim ``bfloat16-weights/float32``** (docs/float-exact.md): the weight matrices are
bfloat16; the biases and the token-embedding table are float32; every activation, product
and partial sum is float32-exact by the rule of :mod:`exactmem.checker.floatexact`
(``P = 24``).  So bf16 weights upcast to float32 in the matmul (torch, onnxruntime) give the
exact value.

Size: as :mod:`.dense_float32`, with ``G L`` words of ``floor(8 / b) b`` label bits each.
Requires ``n >= 11`` positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.constructions.dense_float32 import build_packed
from exactmem.model.dataset import Dataset

WORD_BITS = 8  # words < 2^8: bf16 integers; gate and peeling steps are powers of two
CAP = 128  # one-hot coefficients 2 u <= 254: 7 significant bits


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """The dense bfloat16-weight network for ``ds`` (module docstring)."""
    return build_packed(ds, options, "dense-bf16", WORD_BITS, CAP)


CONSTRUCTION = Construction(
    name="dense-bf16",
    summary="next-token memorizer with bfloat16 weight matrices (float32 accumulation) whose "
            "dense weights are packed label words",
    reference="three-table retrieval in a Transformer, 8-bit words; docs/dense-memorizers.md",
    tasks=("next-token",),
    inputs=("token-ids",),
    build=build,
    options=(Option("seed", int, 0, "seed of the token permutation and the read positions"),),
)
