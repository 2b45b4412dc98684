"""Turn a solver's exact assignment into a :class:`~exactmem.model.NetworkSpec`.

Where the encoding used one unknown ``A = W_K^T W_Q`` (and ``B = W_O W_V``) the emitted
head has ``W_K = [I; 0]``, ``W_Q = [A; 0]``, ``W_V = [I; 0]`` and ``W_O = [B, 0]``
(``head_dim x d_model`` blocks), so the scores and values are exactly those solved for.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from exactmem.arith import ScaledMatrix
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.encode.formula import Problem
from exactmem.search.question.shape import Shape, output_dim, spec_of


def _values(problem: Problem, name: str, values: Sequence[Fraction]) -> list[list[Fraction]]:
    return [[p.evaluate(values) for p in row] for row in problem.params[name]]


def _pad(rows: list[list[Fraction]], total_rows: int, cols: int) -> ScaledMatrix:
    full = rows + [[Fraction(0)] * cols for _ in range(total_rows - len(rows))]
    return ScaledMatrix.from_rows(full, cols=cols)


def witness_spec(ds: Dataset, shape: Shape, problem: Problem,
                 values: Sequence[Fraction],
                 fixed_embed: Sequence[Sequence[Fraction]] | None = None) -> NetworkSpec:
    """The network whose weights are ``values`` (indexed like ``problem.reals``);
    ``fixed_embed``: the input map when it was not searched."""
    m, s = shape.d_model, shape.head_dim
    mats: dict[str, ScaledMatrix] = {}
    if fixed_embed is not None:
        mats["embed"] = ScaledMatrix.from_rows([list(r) for r in fixed_embed],
                                               cols=len(fixed_embed[0]))
    for name in problem.params:
        if name.endswith(".A") or name.endswith(".B"):
            continue
        vals = _values(problem, name, values)
        mats[name] = ScaledMatrix.from_rows(vals, cols=len(vals[0]) if vals else 0)
    ident = [[Fraction(int(i == j)) for j in range(m)] for i in range(m)]
    for layer in range(shape.layers):
        for h in range(shape.heads):
            p = f"att{layer}.{h}."
            if p + "A" in problem.params:
                a = _values(problem, p + "A", values)
                b = _values(problem, p + "B", values)
                mats[p + "Q"] = _pad(a, s, m)
                mats[p + "K"] = _pad(ident, s, m)
                mats[p + "V"] = _pad(ident, s, m)
                mats[p + "O"] = ScaledMatrix.from_rows(
                    [row + [Fraction(0)] * (s - m) for row in b], cols=s)
    input_dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert input_dim is not None
    return spec_of(shape, ds.inputs, input_dim, ds.n, output_dim(ds, shape), mats)


def _padded(m: ScaledMatrix, rows: int, cols: int) -> ScaledMatrix:
    vals = m.to_fractions()
    full = [r + [Fraction(0)] * (cols - m.cols) for r in vals]
    full += [[Fraction(0)] * cols for _ in range(rows - len(full))]
    return ScaledMatrix.from_rows(full, cols=cols)


def pad_witness(spec: NetworkSpec, small: Shape, big: Shape) -> NetworkSpec:
    """The network of shape ``big`` computing what ``spec`` (of shape ``small``) computes.

    Requires :func:`~exactmem.search.question.shape.nests_in`; zero stream coordinates, zero heads
    (zero scores, zero value) and zero hidden units are added; an added block is the
    identity through the residual.
    """
    from exactmem.model.spec import Attention, Embedding, FeedForward, Linear
    from exactmem.search.question.shape import nests_in

    if not nests_in(small, big):
        raise ValueError(f"shape {small.label()} does not nest in {big.label()}")
    m, s, q = big.d_model, big.head_dim, big.ff_width
    layers = list(spec.layers)
    mats: dict[str, ScaledMatrix] = {}
    first = layers[0]
    table = first.table if isinstance(first, Embedding) else \
        first.map.weight if isinstance(first, Linear) else None
    assert table is not None
    mats["embed"] = _padded(table, m, table.cols)
    last = layers[-1]
    assert isinstance(last, Linear) and last.map.bias is not None
    mats["out.W"] = _padded(last.map.weight, last.map.weight.shape[0], m)
    mats["out.b"] = last.map.bias
    blocks = [x for x in layers[1:-1] if isinstance(x, Attention)]
    ffs = [x for x in layers[1:-1] if isinstance(x, FeedForward)]
    for layer, att in enumerate(blocks):
        for h, head in enumerate(att.heads):
            p = f"att{layer}.{h}."
            mats[p + "Q"] = _padded(head.query, s, m)
            mats[p + "K"] = _padded(head.key, s, m)
            mats[p + "V"] = _padded(head.value, s, m)
            mats[p + "O"] = _padded(head.output, m, s)
        if layer < len(ffs):
            w1, w2 = ffs[layer].layers
            assert w1.bias is not None and w2.bias is not None
            mats[f"ff{layer}.W1"] = _padded(w1.weight, q, m)
            mats[f"ff{layer}.b1"] = _padded(w1.bias, q, 1)
            mats[f"ff{layer}.W2"] = _padded(w2.weight, m, q)
            mats[f"ff{layer}.b2"] = _padded(w2.bias, m, 1)
    out_dim = last.map.weight.shape[0]
    return spec_of(big, spec.input_kind, spec.input_dim, spec.seq_len, out_dim, mats)
