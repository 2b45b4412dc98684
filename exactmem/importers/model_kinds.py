"""What ``certify-model`` reads, what it refuses, and the sizes a structure may declare
(docs/certify-model.md).

Layer kinds read (docs/model-layout.md): the token embedding with optional learned positions,
token-wise linear maps, ReLU feed-forward blocks (optional residual), and attention with
uniform, hardmax or softmax heads (query/key/value/output maps, optional biases, score
scales, causal mask, residual); a scalar or argmax readout.  A model that holds a layer of
another kind (LayerNorm, ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer`` ...) is
refused naming the layer and what to do.

Before a single tensor is converted or a list is sized by the structure, the tensors the
structure calls for are counted arithmetically and compared with the tensors present, so
a small file declaring 10^9 heads is refused at once (:func:`check_declared`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from itertools import islice
from typing import Any

from exactmem.errors import SpecError

DOC = "docs/certify-model.md"
SUPPORTED = ("embedding (token table, optional learned positions), linear, feed-forward "
             "(ReLU between maps, optional residual), attention (uniform, hardmax or softmax "
             "heads with query/key/value/output maps, optional biases, score scales, causal "
             "mask, residual), scalar or argmax readout")

_MHA_ADVICE = ("split it into the export layout: for head h, rows h*d_head..(h+1)*d_head-1 "
               "of the query, key and value blocks of in_proj_weight are "
               "layers.{i}.heads.{h}.query/.key/.value, the same columns of out_proj.weight "
               "are .output, in_proj_bias and out_proj.bias become the optional biases, and "
               "the 1/sqrt(d_head) score scale is the layer's 'scales' entry")
UNSUPPORTED: tuple[tuple[str, str, str], ...] = (
    # (name, pattern on a state-dict key, what to do)
    ("nn.TransformerEncoderLayer", r"(^|\.)self_attn\.in_proj_weight$",
     "it contains LayerNorm, which cannot be read; rebuild the block without normalization "
     "as attention + feed-forward layers with residuals, and write its attention as "
     "described for nn.MultiheadAttention"),
    ("nn.MultiheadAttention", r"(^|\.)(in_proj_weight|[qkv]_proj_weight)$", _MHA_ADVICE),
    ("LayerNorm", r"(^|\.)(ln(_\w+)?|\w*norm\w*)\.(weight|bias)$",
     "normalization divides by an irrational square root that the exact evaluation and the "
     "checker do not bound yet, and it cannot be folded into a linear map: train or rebuild "
     "the model without it"),
)
_MODULE_KINDS = {"LayerNorm": "LayerNorm", "RMSNorm": "LayerNorm",
                 "MultiheadAttention": "nn.MultiheadAttention",
                 "TransformerEncoderLayer": "nn.TransformerEncoderLayer",
                 "TransformerDecoderLayer": "nn.TransformerEncoderLayer",
                 "TransformerEncoder": "nn.TransformerEncoderLayer",
                 "Transformer": "nn.TransformerEncoderLayer"}


def _refusal(source: str, kind: str, where: str) -> SpecError:
    advice = next(a for k, _, a in UNSUPPORTED if k == kind)
    return SpecError(f"{source}: certify-model cannot read {kind} ({where}): {advice}. It "
                     f"reads: {SUPPORTED} ({DOC})")


def unsupported_names(names: Iterable[str], source: str) -> SpecError | None:
    """A refusal naming the first unsupported layer kind that tensor names reveal, or None."""
    names = list(names)
    for kind, pattern, _ in UNSUPPORTED:
        hit = next((n for n in names if re.search(pattern, n, re.IGNORECASE)), None)
        if hit is not None:
            return _refusal(source, kind, f"tensor {hit!r}")
    return None


def unsupported_modules(module: Any, source: str) -> SpecError | None:
    """A refusal naming the first submodule of an unsupported kind, or None."""
    walk = getattr(module, "named_modules", None)
    if not callable(walk):
        return None
    for name, sub in walk():
        kind = _MODULE_KINDS.get(type(sub).__name__)
        if kind is not None:
            return _refusal(source, kind, f"module {name or '(the model)'!r}, "
                                          f"{type(sub).__name__}")
    return None


def declared_tensors(skel: dict[str, Any]) -> tuple[int, int, int]:
    """``(count, layer, share)``: the number of tensors the structure calls for, computed
    without listing them, and the layer that calls for the most (with its share)."""
    total, worst, share = 0, -1, 0
    for i, lay in enumerate(skel["layers"]):
        if lay["type"] == "embedding":
            k = 1 + bool(lay.get("positions"))
        elif lay["type"] == "linear":
            k = 1 + bool(lay["bias"])
        elif lay["type"] == "feedforward":
            k = len(lay["bias"]) + sum(bool(b) for b in lay["bias"])
        else:
            k = lay["heads"] * (4 + len(lay.get("biases", [])))
        total += k
        if k > share:
            worst, share = i, k
    return total, worst, share


def check_declared(skel: dict[str, Any], given: Collection[str], names: Iterable[str],
                   source: str) -> None:
    """Refuse a structure that calls for more tensors than ``source`` holds (heads and
    layers declared beyond what the file carries), before anything is sized by it: the
    first missing names are found among at most ``len(given) + 8`` of ``names``."""
    total, worst, share = declared_tensors(skel)
    if total <= len(given):
        return
    first = list(islice((n for n in names if n not in given), 8))
    more = total - len(given) - len(first)
    lay = skel["layers"][worst]
    what = f"{lay['heads']} heads" if lay["type"] == "attention" else lay["type"]
    raise SpecError(f"{source} lacks the tensors {first}"
                    + (f" and at least {more} more" if more > 0 else "")
                    + f" (the structure calls for {total} tensors, layer {worst}: {what}, "
                    f"{share} tensors; the file holds {len(given)}: declared sizes are "
                    f"checked against the tensors present, {DOC})")
