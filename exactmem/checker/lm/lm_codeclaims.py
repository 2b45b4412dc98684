"""The code-length claims of a language-model certificate (standard library only;
docs/memorized-bits.md): ``claims.code_length_bits`` for the real-valued function and
``claims.execution.code_length_bits`` for every execution of the claimed model (read
strictly), each sequence's bound re-proved from the checker's own logit balls, the distinct
sequences they are summed over, and the claim lines of the exact totals of
:func:`lm_codelength.below_uniform`."""

from collections.abc import Mapping
from typing import Any

from ..parse import number, ratio, typed
from ..verdict import Unusable
from . import lm_codelength, lm_forward, lm_uniform

Bound = tuple[int, int]  # a claimed code length "p/q" in bits


def code_lengths(value: Any, toks: list[list[int]], labels: list[list[int]], size: int,
                 field: str = "claims.code_length_bits") -> list[Bound]:
    """``field``: one non-negative ``"p/q"`` per sequence; the dataset must label each
    position with the next token (the last label is the token after the input), so the
    labels of a sequence are its tokens 1..n, coded given token 0."""
    rows = typed(value, list, field)
    if len(rows) != len(toks):
        raise Unusable(f"{field}: expected {len(toks)} bounds, found {len(rows)}")
    out: list[Bound] = []
    for i, text in enumerate(rows):
        p, q = ratio(text, f"{field}[{i}]")
        if p < 0:
            raise Unusable(f"{field}[{i}]: a code length is >= 0")
        if any(labels[i][k] != toks[i][k + 1] for k in range(len(toks[i]) - 1)):
            raise Unusable(f"{field}: sequence {i} is not labelled with its next tokens, so "
                           "its code length is not that of the sequence")
        if labels[i][-1] >= size:
            raise Unusable(f"{field}: sequence {i}'s last label is not a token of the "
                           f"dataset's vocabulary of {size}")
        out.append((p, q))
    return out


def code_length_failure(i: int, claimed: Bound, labels: list[int],
                        outs: Mapping[int, tuple[list[int], int]],
                        derived: dict[int, int] | None = None, f: int = lm_forward.F,
                        what: str | None = None) -> str | None:
    """None when the checker's own upper bound of sequence ``i``'s code length, from the
    logit balls ``outs`` of every position, is at most the claimed ``p/q``; else the failure
    text (``what``: the claim it belongs to, e.g. ``"execution float32"``; None: the
    real-valued function).  ``derived[i]``: that bound (units ``2**-lm_codelength.P``)."""
    p, q = claimed
    upper = 0
    for k, y in enumerate(labels):
        mids, rad = outs[k]
        upper += lm_codelength.position_upper(mids, rad, y, f)
    if derived is not None:
        derived[i] = upper
    if upper * q <= p << lm_codelength.P:
        return None
    bound = (f"{number(p)}/{number(q)} bits is below what the checker proves "
             f"({number(upper)}/2^{lm_codelength.P} bits)")
    if what is None:
        return f"sequence {i}: claimed code length {bound}"
    return f"{what}: code length of sequence {i}: claimed {bound}"


def distinct(toks: list[list[int]], labels: list[list[int]], lo: int, hi: int) -> list[int]:
    """The indices in ``[lo, hi)`` of the sequences that do not repeat an earlier one of the
    whole dataset (same tokens and labels): a repeated sequence is counted once."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out: list[int] = []
    for i in range(hi):
        key = (tuple(toks[i]), tuple(labels[i]))
        if key not in seen:
            seen.add(key)
            if i >= lo:
                out.append(i)
    return out


def _floor(x: Any) -> str:
    return number(x.numerator // x.denominator)


def _ceil(x: Any) -> str:
    return number(-(-x.numerator // x.denominator))


def below_uniform_text(totals: lm_codelength.Totals, sequences: int, n: int, vocab: int,
                       seed: int | None = None) -> str:
    """The code-length claim from the exact totals ``(clipped, unclipped, code, distinct,
    uniform)`` of :func:`lm_codelength.below_uniform`, summed over the distinct sequences
    (docs/memorized-bits.md).  It says what was measured: the model's code length against
    the uniform code, and calls the clipped sum memorized bits only when the data is what a
    recorded generator draws from ``seed`` (:mod:`lm_uniform`: regenerated and compared),
    so that the uniform distribution is the data's true distribution."""
    clipped, unclipped, code, count, uniform = totals
    repeats = sequences - count
    text = (f"code length at most {_ceil(code)} bits for "
            f"the {count} distinct sequences of the dataset"
            + (f" ({repeats} repeated sequences counted once)" if repeats else "")
            + f", {_floor(unclipped)} bits below the "
            f"uniform code over {vocab} tokens ({_floor(uniform)}"
            f" bits: {n} predicted positions per sequence, token 0 not predicted); ")
    if seed is not None:
        return text + (
            f"memorized bits (Morris et al. 2025, the data is uniform random: regenerated "
            f"from seed {seed} by {lm_uniform.NAME}): at least {_floor(clipped)} bits, per "
            "sequence max(0, uniform - code length) with the uniform distribution the data's "
            "true distribution (rigorous bounds: code length rounded up, the rest down)")
    return text + (
        f"per sequence max(0, uniform - code length), summed as Morris et al. 2025: "
        f"at least {_floor(clipped)} bits (rigorous bounds: code length rounded up, the rest "
        "down). These are bits below the uniform code, not memorized bits: the checker "
        "cannot see that the data is uniform random (the dataset records no generator it "
        "regenerates)")


def execution_text(t: dict[str, Any]) -> str:
    """The claim line of ``claims.execution.code_length_bits`` from the totals ``t`` of
    ``lm_verify.check``: the same sums as :func:`below_uniform_text` over the bounds that
    hold for every execution of the model, beside the real-valued figure."""
    e = t["execution"]
    clipped, unclipped, code, count, _ = e["below_uniform"]
    real = t["below_uniform"][0]
    what = ("memorized bits" if t.get("seed") is not None else
            "bits below the uniform code (not memorized bits: the dataset records no "
            "generator the checker regenerates)")
    return (f"{what} under every {e['format']} execution (the model above): at least "
            f"{_floor(clipped)} bits over the {count} distinct sequences, per sequence "
            f"max(0, uniform - code length) with the code length at most {_ceil(code)} bits "
            f"in every such execution ({_floor(unclipped)} bits below the uniform code; the "
            f"real-valued function: at least {_floor(real)} bits)")
