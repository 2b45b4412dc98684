"""The fixed vocabulary of search outcomes.

* :class:`Found` -- a witness network with exact rational weights;
* :class:`Infeasible` -- no network of the shape exists; ``proof_kind`` says why we believe
  it: ``"z3"`` (Z3 said UNSAT; an opinion, not a certificate), ``"z3+enc2"``,
  ``"z3+cvc5"``, ``"z3+enc2+cvc5"`` (the refutation was confirmed by Z3 on the second,
  independently written encoding and/or by cvc5: :mod:`exactmem.search.crosscheck`) or
  ``"label-consistency"`` (two sequences no permutation-equivariant network can tell apart
  carry different labels: checkable from the dataset alone) or ``"lrat"`` (bit-bounded
  weights: a SAT solver's LRAT refutation of the CNF, verified by the stdlib checker
  :mod:`exactmem.checker.proofs.lrat`; ``"drup"`` for DRUP refutations checked by
  :mod:`exactmem.checker.proofs.drup`);
* :class:`Unknown` -- timeout, resource limit, or a model that could not be made rational.

Backends return :class:`Assignment` (exact values of the unknowns) instead of ``Found``;
the search layer turns it into a network and certifies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from exactmem.model.spec import NetworkSpec

PROOF_KINDS = ("z3", "z3+enc2", "z3+cvc5", "z3+enc2+cvc5", "z3-thresholds",
               "z3-thresholds+enc2", "z3-thresholds+cvc5", "z3-thresholds+enc2+cvc5",
               "label-consistency", "drup", "lrat")


@dataclass(frozen=True, slots=True)
class Assignment:
    """Exact values of every real unknown of a problem, indexed like ``Problem.reals``."""

    values: tuple[Fraction, ...]
    rational_resolve: bool = False  # True when the solver's first model was algebraic


@dataclass(frozen=True, slots=True)
class Found:
    witness: NetworkSpec


@dataclass(frozen=True, slots=True)
class Infeasible:
    proof_kind: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.proof_kind not in PROOF_KINDS:
            raise ValueError(f"proof kind must be one of {PROOF_KINDS}, found {self.proof_kind!r}")


@dataclass(frozen=True, slots=True)
class Unknown:
    reason: str


Outcome = Found | Infeasible | Unknown
BackendOutcome = Assignment | Infeasible | Unknown
