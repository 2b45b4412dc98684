"""Morris et al.'s ``mem_U`` against a reference model (standard library only;
docs/memorized-bits.md, "mem_U against a reference model").

In the paper's notation the trained model is ``theta^`` (theta-hat: the certificate's
``model``) and the reference model is ``theta`` (``reference.model``, in the same format):

    mem_U(x, theta, theta^) = H^K(x | theta) - H^K(x | theta, theta^),
    H^K(x | theta) ~ -log2 p(x | theta),
    H^K(x | theta, theta^) ~ -log2 max{p(x | theta^), p(x | theta)},

so, with ``C_m(x) = -log2 p(x | m)`` the code length of the predicted tokens under ``m``,
``mem_U(x) = C_theta(x) - min(C_theta(x), C_theta^(x)) = max(0, C_theta(x) - C_theta^(x))``.
The certificate claims per sequence ``reference.code_length_lower_bits[i] <= C_theta(x_i)
<= reference.code_length_bits[i]`` (and ``claims.code_length_bits[i] >= C_theta^(x_i)``,
checked by :mod:`lm_verify`); the checker re-derives both bounds of ``C_theta`` from its own
logit balls of the reference model (:func:`lm_codelength.position_lower`,
:func:`lm_codelength.position_upper`) and rejects a claim it cannot prove.  From the proved
claims, per distinct sequence, ``mem_U(x) >= max(0, L_theta(x) - min(U_theta(x),
U_theta^(x)))`` (``L`` a lower, ``U`` an upper bound), summed with the clipping at 0 of
Morris et al.'s estimator.
"""

import hashlib
from fractions import Fraction
from typing import Any

from ..cert_dataset import canonical
from ..parse import number, obj, ratio, typed
from ..verdict import Unusable
from . import lm_codelength, lm_forward
from .lm_bounds import Degenerate
from .lm_model import header, model, prepared, work

KEYS = ("model", "code_length_bits", "code_length_lower_bits")


def _bounds(value: Any, where: str, count: int) -> list[tuple[int, int]]:
    rows = typed(value, list, where)
    if len(rows) != count:
        raise Unusable(f"{where}: expected {count} bounds, found {len(rows)}")
    out = []
    for i, text in enumerate(rows):
        p, q = ratio(text, f"{where}[{i}]")
        if p < 0:
            raise Unusable(f"{where}[{i}]: a code length is >= 0")
        out.append((p, q))
    return out


def read(value: Any, head: dict[str, Any], toks: list[Any], coded: Any) -> dict[str, Any]:
    """``reference``: the reference model's header (same vocabulary as the model's, a
    context that holds the sequences) and the claimed bounds of its code lengths; the
    model's own code lengths (``claims.code_length_bits``) must be claimed too."""
    obj(value, "reference", KEYS)
    if coded is None:
        raise Unusable("reference: mem_U needs the model's code lengths "
                       "(claims.code_length_bits) beside the reference's")
    ref = header(value["model"])
    if "weights" in ref:
        raise Unusable("reference.model.weights: a reference model's tensors are embedded "
                       "(model.tensors); bound weights are read for the model only")
    if ref["vocab_size"] != head["vocab_size"]:
        raise Unusable(f"reference.model.vocab_size: {ref['vocab_size']}, the model's is "
                       f"{head['vocab_size']} (one tokenizer for both)")
    if len(toks[0]) > ref["context"]:
        raise Unusable(f"reference.model: sequences of {len(toks[0])} tokens exceed its "
                       f"context of {ref['context']}")
    upper = _bounds(value["code_length_bits"], "reference.code_length_bits", len(toks))
    lower = _bounds(value["code_length_lower_bits"], "reference.code_length_lower_bits",
                    len(toks))
    return {"value": value, "upper": upper, "lower": lower}


def cost(ref: dict[str, Any], toks: list[Any]) -> int:
    """The multiply-adds of the reference's forward passes (every position of every
    sequence), from its header."""
    n = len(toks[0])
    return int(work(ref["value"]["model"], [n] * len(toks), n))


def prepare(ref: dict[str, Any], toks: list[Any], pos: list[Any]) -> None:
    """Read the reference's tensors and choose its working precision (``ref["net"]``,
    ``ref["f"]``) and its description for the claim."""
    m = ref["value"]["model"]
    net = model(m)
    ref["net"] = prepared(net, toks, pos, True)
    ref["f"] = ref["net"]["f"]
    params = sum(len(t["values"]) for t in m["tensors"].values())
    digest = hashlib.sha256(canonical(m).encode()).hexdigest()
    ref["name"] = (f"reference model sha256:{digest[:16]}, layers {m['layers']}, d_model "
                   f"{m['d_model']}, {params} parameters")


def sequence(ref: dict[str, Any], i: int, toks: list[int], labels: list[int],
             derived: dict[int, tuple[int, int]] | None = None) -> list[str]:
    """The failures of sequence ``i``'s claimed reference bounds against the checker's own
    (units ``2**-P``; stored in ``derived[i]`` as ``(lower, upper)`` when given)."""
    net, f, P = ref["net"], ref["f"], lm_codelength.P
    try:
        outs = lm_forward.logits(net, toks, range(len(toks)))
    except Degenerate as exc:
        return [f"sequence {i}: reference model: {exc}"]
    if max(labels) >= net["vocab"]:
        return [f"sequence {i}: a label is not a token of the reference's vocabulary"]
    lo = hi = 0
    for k, y in enumerate(labels):
        mids, rad = outs[k]
        lo += lm_codelength.position_lower(mids, rad, y, f)
        hi += lm_codelength.position_upper(mids, rad, y, f)
    if derived is not None:
        derived[i] = (lo, hi)
    bad = []
    (pu, qu), (pl, ql) = ref["upper"][i], ref["lower"][i]
    if hi * qu > pu << P:
        bad.append(f"sequence {i}: reference model: claimed code length {number(pu)}/"
                   f"{number(qu)} bits is below what the checker proves ({number(hi)}/2^{P} "
                   "bits)")
    if lo * ql < pl << P:
        bad.append(f"sequence {i}: reference model: claimed code length lower bound "
                   f"{number(pl)}/{number(ql)} bits is above what the checker proves "
                   f"({number(lo)}/2^{P} bits)")
    return bad


def mem_u(ref: dict[str, Any], coded: list[tuple[int, int]], once: list[int]) -> Fraction:
    """``sum_i max(0, L_theta(x_i) - min(U_theta(x_i), U_theta^(x_i)))`` over the distinct sequences
    ``once``, from the (proved) claimed bounds: a lower bound of Morris et al.'s clipped
    sum of ``mem_U``."""
    total = Fraction(0)
    for i in once:
        low, up, own = (Fraction(*ref["lower"][i]), Fraction(*ref["upper"][i]),
                        Fraction(*coded[i]))
        total += max(Fraction(0), low - min(up, own))
    return total


def text(total: Fraction, count: int, sequences: int, name: str) -> str:
    """The mem_U claim line (docs/memorized-bits.md)."""
    repeats = sequences - count
    return (f"mem_U at least {number(total.numerator // total.denominator)} bits over {count} "
            "distinct sequences" + (f" ({repeats} repeated sequences counted once)"
                                    if repeats else "")
            + f" (Morris et al. 2025, {name}: per sequence max(0, H(x|ref) - min(H(x|ref), "
            "H(x|model))), H the code length of the predicted tokens, bounded below for the "
            "reference and above for both; rigorous bounds on the real-valued functions of "
            "both models' stored weights)")
