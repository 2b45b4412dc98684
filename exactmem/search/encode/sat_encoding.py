"""Bit-bounded networks to CNF: "a shape with b-bit integer weights memorizes the dataset".

The CNF is built by the **trusted encoder** :mod:`exactmem.checker.proofs.search_encode` (the
grid, the exact integer semantics, symmetry breaking and segment clauses are described
there and in docs/search.md): the search writes exactly the CNF that ``exactmem
check-search`` re-derives from the question, so there is one encoder, not two.  This
module turns a :class:`~exactmem.model.dataset.Dataset` and a
:class:`~exactmem.search.question.shape.Shape` into the encoder's
:class:`~exactmem.checker.proofs.search_encode.Question`, adds the solver-side variant with open
label literals (:func:`encode_labelled`, never written as a proof) and reads networks
off models.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from exactmem.arith import ScaledMatrix
from exactmem.checker.proofs.search_circuit import Circuit, Int
from exactmem.checker.proofs.search_encode import BitEncoder, Question, dimacs
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.encode.encoding import Token, reads_of
from exactmem.search.question.shape import Shape, output_dim, spec_of


@dataclass(slots=True)
class BitProblem:
    circuit: Circuit
    bits: int
    weights: dict[str, list[list[Int]]]
    header: list[str]

    @property
    def clauses(self) -> list[list[int]]:
        return self.circuit.clauses

    def cnf(self) -> str:
        """The DIMACS text, opened by the question's comment lines."""
        return dimacs(self.circuit.nvars, self.circuit.clauses, self.header)


def question(ds: Dataset, shape: Shape, bits: int,
             fixed_embed: list[list[int]] | None = None, symmetry: bool = True,
             segments: bool = True) -> Question:
    """The trusted encoder's question for ``ds`` and ``shape``."""
    if bits < 1:
        raise SpecError(f"--bits must be >= 1, found {bits}")
    reads_of(ds)  # refuses what the search does not support (sequence-to-sequence)
    size = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert size is not None and all(isinstance(y, int) for y in ds.labels)
    return Question(ds.inputs, size, tuple(tuple(s) for s in ds.sequences),
                    tuple(int(y) for y in ds.labels),
                    ds.sha256(), shape.layers, shape.heads, shape.d_model, shape.head_dim,
                    shape.ff_width, shape.residual, shape.readout, bits, symmetry, segments,
                    None if fixed_embed is None else tuple(tuple(r) for r in fixed_embed))


def _problem(enc: BitEncoder) -> BitProblem:
    return BitProblem(enc.c, enc.q.bits, enc.weights, enc.q.header())


def tail_segments(ds: Dataset, shape: Shape) -> bool:
    """Do the segment clauses apply (``d_model = 1``, argmax over two labels)?"""
    return shape.d_model == 1 and shape.readout == "argmax" and output_dim(ds, shape) == 2


def encode_bits(ds: Dataset, shape: Shape, bits: int,
                fixed_embed: list[list[int]] | None = None, symmetry: bool = True,
                segments: bool = True) -> BitProblem:
    """The CNF whose models are the b-bit integer networks of ``shape`` that memorize
    ``ds`` (weights read off the weight literals) -- all of them with ``symmetry=False``;
    with it, those in lexicographic order and, for ``d_model = head_dim = 1``, built from
    representative heads and units (every network has such a copy computing the same
    function).  ``segments``: the implied segment clauses where they apply.
    ``fixed_embed``: for vector inputs, a fixed integer ``d_model x dim`` input map."""
    q = question(ds, shape, bits, fixed_embed, symmetry, segments)
    return _problem(BitEncoder(q).encode())


class _Labelled(BitEncoder):
    """The circuit with the label of every read position an open literal."""

    def label_literals(self) -> dict[tuple[int, Token], int]:
        """Two labels, argmax readout: per read position ``(i, t)`` a fresh literal ``l``
        with ``l -> margin > 0`` and ``-l -> margin < 0``, ``margin = score_1 - score_0``."""
        c, q = self.c, self.q
        mixes, scale = self.front()
        w, b = self.mat("out.W", 2, q.d_model), self.mat("out.b", 2, 1)
        row = [c.add(p, r, negate_y=True) for p, r in zip(w[1], w[0], strict=True)]
        bias = c.add(b[1][0], b[0][0], negate_y=True)
        lits = {}
        for key, x in mixes.items():
            margin = c.add(self.row_dot(row, x), c.mul_const(bias, scale))
            lit = lits[key] = c.var()
            c.clauses.append([-lit, c.less(c.const(0), margin)])
            c.clauses.append([lit, c.less(margin, c.const(0))])
        if q.symmetry:
            self.break_symmetries()
        return lits


@dataclass(slots=True)
class LabelledProblem:
    """The CNF of a shape on a set of sequences with the labels left open: ``literals``
    maps each read position (multiset index, last token) to its label literal."""

    problem: BitProblem
    literals: dict[tuple[int, Token], int]


def encode_labelled(ds: Dataset, shape: Shape, bits: int) -> LabelledProblem:
    """:func:`encode_bits` for two labels and an argmax readout with the label of every
    read position an open literal: the models with literals set as a labelling are the
    sorted b-bit networks memorizing it (the labels of ``ds`` are ignored).  Solver-side
    only: its answers are proposals, never written as proofs."""
    if shape.readout != "argmax" or output_dim(ds, shape) != 2:
        raise SpecError("label literals need an argmax readout over two labels")
    enc = _Labelled(question(ds, shape, bits))
    lits = enc.label_literals()
    return LabelledProblem(_problem(enc), lits)


def witness_from_model(ds: Dataset, shape: Shape, problem: BitProblem,
                       model: set[int], fixed_embed: list[list[int]] | None = None
                       ) -> NetworkSpec:
    """The integer network of a model."""
    mats = {name: ScaledMatrix.from_rows([[Fraction(problem.circuit.value(x, model))
                                           for x in row] for row in rows],
                                         cols=len(rows[0]) if rows else 0)
            for name, rows in problem.weights.items()}
    if fixed_embed is not None:
        mats["embed"] = ScaledMatrix.from_rows([[Fraction(v) for v in row]
                                                for row in fixed_embed],
                                               cols=len(fixed_embed[0]))
    dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert dim is not None
    return spec_of(shape, ds.inputs, dim, ds.n, output_dim(ds, shape), mats)
