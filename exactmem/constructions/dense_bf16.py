"""Dense bfloat16-weight memorizer: :mod:`.dense_float32` with signed 9-bit words.

The lean layout of :mod:`.dense_int8` (``build_packed(..., lean=True)``) with words below
``2^9`` (``floor(9 / b)`` fields of ``b`` label bits: three 3-bit fields for 8 classes),
stored as ``word - 256`` in ``[-256, 255]`` -- integers of magnitude at most 256, which
bfloat16 holds exactly, so its sign bit carries the ninth bit -- and added back by the word
layer's bias (``256 - 2^9``); the gate ``2^9`` and every table coordinate below 128.  Every
entry of every weight *matrix* is then a bfloat16 value (at most 8 significant bits): the
stored words, the gate and the peeling steps (powers of two), the one-hot coefficients
``2 u <= 254`` and the attention and pass-through entries (0 and 1).  N = 4096 (n = 16,
vocab 64, 8 classes): 10 x 60 words per table, 4,659 bf16 entries, 2.64 label bits per
bf16 parameter; N = 16384: 3.84.

**Claim ``bfloat16-weights/float32``** (docs/float-exact.md): the weight matrices are
bfloat16; the biases and the token-embedding table are float32; every activation, product
and partial sum is float32-exact by the rule of :mod:`exactmem.checker.floatexact`
(``P = 24``).  So bf16 weights upcast to float32 in the matmul (torch, onnxruntime) give the
exact value.

Size: as :mod:`.dense_float32`, with ``G L`` words of ``floor(9 / b) b`` label bits each.
Requires ``n >= 11`` positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.constructions.dense_float32 import build_packed
from exactmem.model.dataset import Dataset

WORD_BITS = 9  # words < 2^9, stored as word - 256 in [-256, 255]: bf16 integers
OFFSET = 256  # added back by the word layer's (float32) bias
CAP = 128  # one-hot coefficients 2 u <= 254: 7 significant bits


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """The dense bfloat16-weight network for ``ds`` (module docstring)."""
    return build_packed(ds, options, "dense-bf16", WORD_BITS, CAP, lean=True,
                        offset=OFFSET)


CONSTRUCTION = Construction(
    name="dense-bf16",
    summary="next-token memorizer with bfloat16 weight matrices (float32 accumulation) whose "
            "dense weights are packed label words",
    reference="three-table retrieval in a Transformer, 8-bit words; docs/dense-memorizers.md",
    tasks=("next-token",),
    inputs=("token-ids",),
    build=build,
    options=(Option("seed", int, 0, "seed of the token permutation and the read positions"),),
    claims=("bfloat16-weights/float32",),
)
