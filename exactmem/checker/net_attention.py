"""The attention rule of the checker, written once (Kajitsuka & Sato eq. 2, column-wise:
keys index rows, queries columns; docs/certificate-format.md, "Semantics pinned down").

Shared by the checker's three passes over a network certificate:

* which keys a query reads: the layer's ``keys`` (every position when ``null``), and with
  a causal mask only those ``<= q`` (:func:`keys_of`, :func:`key_sets`);
* which keys a head weighs: every key equally when its scores are all zero (uniform
  attention, or a hardmax/softmax head with zero query or key weights: :func:`weighs_equally`);
  under hardmax every key whose score ``k . q`` is maximal, the weight split uniformly over
  the tied keys (:func:`tied`; a positive score scale changes no comparison);
* the head's parts: its value path ``W_O W_V`` (:func:`value_output`) and the shift
  ``sum_h (W_O b_V + b_O)`` of its biases (:func:`head_shift`: the weights of a query sum
  to 1), the heads added in turn, then the residual;
* the new state: one output per sequence and query, equal outputs kept once
  (:func:`restate`).

Where the passes differ, and why.  The exact pass (``net_forward.attention``) applies the
rule to exact scores.  The float-exact pass (``floatexact._attention``) applies the same
rule to the same exact scores, but in the float mirror's order of operations -- ``W_V``,
the sum of the tied values divided by their count, then ``W_O`` -- since each of those steps
is a float operation it must prove exact, so it does not use :func:`value_output`.  The
interval pass (``softmax_check._attention``) has score *intervals*: a softmax row is
bounded (``softmax_bounds``), and a hardmax head is decided only when one key's lower bound
beats every other key's upper bound (:func:`separated`); with intervals a tie cannot be told
from a near tie, so the uniform split over tied keys is not available there.
"""

from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction
from typing import TypeVar

from .parse import Head, Layer, Matrix, lcm

T = TypeVar("T", bound=Hashable)


def keys_of(layer: Layer, n: int, q: int) -> list[int]:
    """The key positions of the query at ``q`` (``keys``, then the causal mask)."""
    keys: Iterable[int] = layer["keys"] if layer["keys"] is not None else range(n)
    return [p for p in keys if p <= q] if layer["causal"] else list(keys)


def key_sets(layer: Layer, n: int, queries: Iterable[int]) -> dict[int, list[int]]:
    """``{query: its key positions}`` for every query position."""
    return {q: keys_of(layer, n, q) for q in queries}


def key_positions(keysets: dict[int, list[int]]) -> list[int]:
    """Every position some query reads as a key, in order."""
    return sorted({p for ks in keysets.values() for p in ks})


def weighs_equally(layer: Layer, h: int) -> bool:
    """Head ``h`` weighs every key of a query equally: its scores are all zero (the parser's
    ``zero_scores``: ``W_K = 0``, or ``W_Q = 0`` without a query bias), which every head of a
    uniform layer has."""
    return bool(layer["zero_scores"][h]) or layer["kind"] == "uniform"


def tied(scores: Sequence[int]) -> list[int]:
    """Hardmax: the indices of every maximal score (the tied maximizers ``I_j``, each weighed
    ``1 / |I_j|``)."""
    best = max(scores)
    return [j for j, s in enumerate(scores) if s == best]


def separated(lows: Sequence[int], highs: Sequence[int]) -> int | None:
    """Hardmax on score intervals ``[lows[j], highs[j]]`` (over one positive denominator):
    the key whose lower bound beats every other key's upper bound, or ``None`` when no key is
    separated (the maximizers, and so the weights, are not decided by the bounds)."""
    top = max(range(len(lows)), key=lows.__getitem__)
    if any(highs[j] >= lows[top] for j in range(len(lows)) if j != top):
        return None
    return top


def value_output(head: Head) -> Matrix:
    """The head's value path ``W_O W_V`` as one matrix (rows, den)."""
    (o, od), (v, vd) = head["output"], head["value"]
    ov = [[sum(o[i][t] * v[t][j] for t in range(len(v))) for j in range(len(v[0]))]
          for i in range(len(o))]
    return ov, od * vd


def zero_bias(rows: Sequence[object]) -> Matrix:
    """A zero bias for a map with ``len(rows)`` output rows."""
    return [[0] for _ in rows], 1


def bias_or_zero(h: Head, name: str, mat: Matrix) -> Matrix:
    """The head's bias ``name`` as a ``(rows, den)`` pair, zeros when absent."""
    bias: Matrix | None = h[name]
    return bias if bias is not None else zero_bias(mat[0])


def head_shift(heads: Sequence[Head]) -> tuple[list[int], int] | None:
    """``sum_h (W_O b_V + b_O)`` over the heads (the weights of a query sum to 1), as an
    integer vector over one denominator, or ``None`` when no head has those biases."""
    total: list[Fraction] | None = None
    for h in heads:
        (o, od) = h["output"]
        parts: list[list[Fraction]] = []
        if h["value_bias"] is not None:
            b, bd = h["value_bias"]
            parts.append([Fraction(sum(o[i][t] * b[t][0] for t in range(len(b))), od * bd)
                          for i in range(len(o))])
        if h["output_bias"] is not None:
            b, bd = h["output_bias"]
            parts.append([Fraction(r[0], bd) for r in b])
        for part in parts:
            total = part if total is None else [x + y for x, y in zip(total, part)]
    if total is None:
        return None
    den = 1
    for x in total:
        den = lcm(den, x.denominator)
    return [x.numerator * (den // x.denominator) for x in total], den


def restate(outs: Iterable[T], index: Sequence[Sequence[int]], queries: Sequence[int],
            n: int) -> tuple[list[T], list[list[int]]]:
    """The state after an attention layer from its outputs, one per sequence and query in
    that order: the distinct outputs (numbered by first appearance) and, per sequence, each
    query's output number (``-1`` at the positions no longer needed)."""
    table: dict[T, int] = {}
    distinct: list[T] = []
    new_index: list[list[int]] = []
    it = iter(outs)
    for _seq in index:
        row = [-1] * n
        for q in queries:
            c = next(it)
            j = table.get(c)
            if j is None:
                j = table[c] = len(distinct)
                distinct.append(c)
            row[q] = j
        new_index.append(row)
    return distinct, new_index
