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
from exactmem.search.encoding import output_dim
from exactmem.search.formula import Problem
from exactmem.search.shape import Shape, spec_of


def _values(problem: Problem, name: str, values: Sequence[Fraction]) -> list[list[Fraction]]:
    return [[p.evaluate(values) for p in row] for row in problem.params[name]]


def _pad(rows: list[list[Fraction]], total_rows: int, cols: int) -> ScaledMatrix:
    full = rows + [[Fraction(0)] * cols for _ in range(total_rows - len(rows))]
    return ScaledMatrix.from_rows(full, cols=cols)


def witness_spec(ds: Dataset, shape: Shape, problem: Problem,
                 values: Sequence[Fraction]) -> NetworkSpec:
    """The network whose weights are ``values`` (indexed like ``problem.reals``)."""
    m, s = shape.d_model, shape.head_dim
    mats: dict[str, ScaledMatrix] = {}
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
