"""``kajitsuka2025-seq2seq``: Corollary 4.1 of Kajitsuka & Sato, ICLR 2025.

The architecture of Theorem 4.1 (``E_out o FF_2 o UA o FF_1 o E_in``, width 14) memorizes
all ``nN`` position labels of a seq-to-seq dataset.  The paper gives no separate proof
("put each token at the end and predict the next token"); mechanically, steps 1-3 of the
next-token pipeline are unchanged (they depend only on the multisets and the tokens), and
``FF_2`` is Lemma C.1 on every distinct context id ``(phi(x_k), F(x_k), S_i / n)`` over all
positions ``k`` (at most ``nN`` points) with labels ``y_k``.  The readout reads every position.

Assumption: label consistency eq. (10): equal multisets and equal tokens carry equal labels.
Size: depth ``~ sqrt(nN log nN) + sqrt(nN / log nN) max(log R, log C)``, width 14, bits
``~ sqrt(nN)`` up to logs (Remark 4.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactmem.constructions.base import BuildResult, Construction
from exactmem.constructions.kajitsuka2025_next_token import (
    OPTIONS,
    build_pipeline,
    r_over_delta_of,
    theorem_bound,
)
from exactmem.errors import ConstructionError
from exactmem.model.dataset import Dataset


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    if ds.task != "seq2seq":
        raise ConstructionError("kajitsuka2025-seq2seq needs a seq2seq dataset (a label per "
                                "position); use kajitsuka2025-next-token for next-token data")
    if int(options.get("max_bits", 0) or 0):
        from exactmem.constructions.kajitsuka2025_float import build_float_ready

        return build_float_ready(ds, options, every=True)
    return build_pipeline(ds, options, every=True)


def bound(N: int = 0, n: int = 0, d: int = 0, C: int = 0, **kw: Any) -> dict[str, Any]:  # noqa: N803
    """Corollary 4.1: Theorem B.1 / E.1's formulas with N replaced by nN, real r / delta."""
    out = theorem_bound(N * n, n, d, C, token_ids=kw.get("inputs") == "token-ids",
                        r_over_delta=r_over_delta_of(kw))
    out["theorem"] = "Cor. 4.1"
    return out


CONSTRUCTION = Construction(
    name="kajitsuka2025-seq2seq",
    summary="O~(sqrt(nN)) seq-to-seq Transformer: the Theorem 4.1 pipeline on all nN labels",
    reference="Kajitsuka & Sato, ICLR 2025, Corollary 4.1",
    tasks=("seq2seq",),
    inputs=("token-ids", "vectors"),
    build=build,
    options=OPTIONS,
    bound=bound,
)
