"""The other readings of a checkpoint's tensors that its config could have mistyped.

A checkpoint's tensors do not fix every part of the function: the head count only splits
``d_model`` (any divisor gives tensors of the same shapes), and a torch encoder stack's
norm placement (``norm_first``) and activation (``relu`` / ``gelu``) are config fields
alone.  A cross-check of the imported function against a module built from the same
config cannot see a mistyped field: both sides read it the same way.  What can be seen is
the data: the model was trained on (or labelled by) its own function, so the reading it
was trained under fits the labels far better than a mistyped one.

:func:`alternatives` lists the readings (every divisor of ``d_model`` as the head count;
for a torch encoder stack also both norm placements and both activations);
:func:`judge` counts, on at most :data:`MAX_SEQUENCES` sequences, the positions where each
reading's float64 argmax is the label (a reading whose logits there are the config's, to
:data:`SAME`, is the same function on the data, not an alternative), and refuses
(:class:`~exactmem.errors.SpecError`, one line naming the alternatives) when another
reading fits the labels clearly better than the config's: by at least :func:`margin`
positions (10% of them, at least 2); with ``strict``, whenever another reading fits at
least as well.  docs/certify-model.md, "Which function".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64

MAX_SEQUENCES = 64  # sequences the readings are compared on (each reading: one float64 pass)
SAME = 1e-6  # logits this close (relative to the largest) are one function on the data
NAMES = {"relu": "ReLU", "gelu_erf": "GELU", "gelu_tanh": "GELU (tanh)"}


def describe(spec: LMSpec, kind: str) -> str:
    """A reading in words: ``heads 2`` (and for an encoder stack ``pre-LN, GELU``)."""
    text = f"heads {spec.heads}"
    if kind == "torch-encoder":
        text += f", {'pre' if spec.norm_first else 'post'}-LN, {NAMES[spec.activation]}"
    return text


def alternatives(spec: LMSpec, kind: str) -> list[LMSpec]:
    """The readings of the same tensors other than ``spec``'s own.  None for rotary or
    grouped-query models (GPT-NeoX, LLaMA): their import lays the tensors out by the
    config's head count, so another count is another import, not another reading."""
    if spec.rotary_dims or spec.kv_heads:
        return []
    heads = [h for h in range(1, spec.d_model + 1) if spec.d_model % h == 0]
    places = (True, False) if kind == "torch-encoder" else (spec.norm_first,)
    acts = ("gelu_erf", "relu") if kind == "torch-encoder" else (spec.activation,)
    out = []
    for h in heads:
        for first in places:
            for act in acts:
                if (h, first, act) != (spec.heads, spec.norm_first, spec.activation):
                    out.append(dataclasses.replace(spec, heads=h, norm_first=first,
                                                   activation=act))  # type: ignore[arg-type]
    return out


def matches(logits: np.ndarray, labels: np.ndarray) -> int:
    """Positions whose label is the unique float argmax."""
    top = logits.max(-1)
    at = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    unique = (logits == top[..., None]).sum(-1) == 1
    return int(((at == top) & unique).sum())


def margin(positions: int) -> int:
    """How many more labels another reading must fit to be clearly better."""
    return max(2, positions // 10)


@dataclass(frozen=True, slots=True)
class Readings:
    """The config's reading and the best others, with the labels each fits."""

    stated: str
    fits: int
    positions: int
    others: tuple[tuple[str, int], ...]  # best first

    def line(self) -> str:
        best = ", ".join(f"{name} {n}" for name, n in self.others[:3])
        return (f"config reading ({self.stated}) fits {self.fits} of {self.positions} labels "
                f"(float64 argmax); of {len(self.others)} other readings of the same tensors "
                f"the best fit {best or 'none'}")


def judge(spec: LMSpec, kind: str, tokens: np.ndarray, labels: Sequence[Sequence[int]],
          stated_logits: np.ndarray, strict: bool = False, source: str = "the checkpoint"
          ) -> Readings:
    """Compare the config's reading (``stated_logits``: its float64 logits on ``tokens``)
    with :func:`alternatives` on the labels; refuses a clearly better alternative (or,
    ``strict``, any as good) with one :class:`SpecError` line."""
    from exactmem.lm.batching import batch_for

    count = min(MAX_SEQUENCES, batch_for(spec, np.asarray(tokens).shape[1]))  # bounded memory
    toks = np.asarray(tokens)[:count]
    ys = np.asarray([list(y) for y in labels[:count]])
    stated = stated_logits[:count]
    fits = matches(stated, ys)
    scale = SAME * max(1.0, float(np.abs(stated).max()))
    scored = []
    for alt in alternatives(spec, kind):
        z = logits64(alt, toks)
        if float(np.abs(z - stated).max()) > scale:  # the same logits: not another reading
            scored.append((describe(alt, kind), matches(z, ys)))
    scored.sort(key=lambda x: -x[1])
    result = Readings(describe(spec, kind), fits, int(ys.size), tuple(scored))
    need = fits if strict else fits + margin(int(ys.size))
    better = [(name, n) for name, n in scored if n >= need]
    if better:
        named = "; ".join(f"{name} fits {n}" for name, n in better[:4])
        more = f" and {len(better) - 4} more" if len(better) > 4 else ""
        raise SpecError(
            f"{source}: its config's reading ({result.stated}) fits {fits} of {ys.size} labels "
            f"(float64 argmax), but the same tensors read as {named}{more}: the config may be "
            f"mistyped, and the tensors do not say which reading is the trained model; "
            f"correct the config, or certify through the API with your own module "
            f"(exactmem.certify_model(module, data, ...)) to cross-check against it"
            + ("" if not strict else " (--strict-config: the config's reading must fit "
               "strictly best)"))
    return result
