"""Dense int8-weight memorizer: :mod:`.dense_float32` with 6-bit words and int8 matrices.

The layout of :mod:`.dense_float32` (three-table retrieval, the words as the dense weights
of one ReLU layer) with words below ``2^6`` (``floor(6 / b)`` fields of ``b`` label bits),
the word-layer gate ``2^6`` and every table coordinate below 64.  Then every entry of every
weight *matrix* is an integer in ``[-128, 127]``: the words (``< 64``), the gate (64), the
one-hot coefficients ``2 u <= 126``, the peeling steps ``-2^k`` with ``k <= 7`` (three words
``< 3 * 2^6 < 2^8``), the attention and pass-through entries (0 and 1).

**Claim ``int8``** (docs/float-exact.md): the weight matrices are int8; the biases and the
token-embedding table are int32 (a bias is added to an int32 accumulator, the table is read
by index, never multiplied); inputs and activations are integers; every sum ``sum |terms|``
(any order) is below ``2^31``, so an int8 x int32 matmul with int32 accumulation (torch
integer matmul, ONNX ``MatMulInteger``) gives the exact value.  The largest sum here is
about ``4 * V^2`` (one-hot layer), far inside.

**Layout** (``build_packed(..., lean=True)``): the field ``s = pi(t) mod f`` of one token
(no modular steps in the extractor), tables sized on the largest field group, the shape
``(G, La, Lb)`` of fewest weight-matrix entries (``Lb = 1``: two positions per table, the
column coordinate up to 63), and each lookup's ``G`` word units summed in one unit before
the output map (``G + d`` entries, not ``d G``).  N = 4096 (n = 16, vocab 64, 8 classes):
14 x 64 words per table, 5,733 int8 entries, 2.14 label bits per int8 parameter.

Size: as :mod:`.dense_float32`, with ``G L`` words of ``floor(6 / b) b`` label bits each.
Requires ``n >= 11`` positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.constructions.dense_float32 import build_packed
from exactmem.model.dataset import Dataset

WORD_BITS = 6  # words < 64, gate 64, peeling steps down from 2^7 = 128 (as -128: int8)
CAP = 64  # one-hot coefficients 2 u <= 126


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """The dense int8-weight network for ``ds`` (module docstring)."""
    return build_packed(ds, options, "dense-int8", WORD_BITS, CAP, lean=True)


CONSTRUCTION = Construction(
    name="dense-int8",
    summary="next-token memorizer with int8 weight matrices (int32 accumulation) whose dense "
            "weights are packed label words",
    reference="three-table retrieval in a Transformer, int8 words; docs/dense-memorizers.md",
    tasks=("next-token",),
    inputs=("token-ids",),
    build=build,
    options=(Option("seed", int, 0, "seed of the token permutation and the read positions"),),
    claims=("int8",),
)
