"""The fixed vocabulary of search outcomes.

* :class:`Found` -- a witness network with exact rational weights;
* :class:`Infeasible` -- no network of the shape exists; ``proof_kind`` says why we believe
  it: ``"z3"`` (Z3 said UNSAT; an opinion, not a certificate), ``"z3+enc2"``,
  ``"z3+cvc5"``, ``"z3+enc2+cvc5"`` (the refutation was confirmed by Z3 on the second,
  independently written encoding and/or by cvc5: :mod:`exactmem.search.solvers.crosscheck`) or
  ``"label-consistency"`` (two sequences no permutation-equivariant network can tell apart
  carry different labels: checkable from the dataset alone) or ``"lrat"`` (bit-bounded
  weights: a SAT solver's LRAT refutation of the CNF, verified by the stdlib checker
  :mod:`exactmem.checker.proofs.lrat`; ``"drup"`` for DRUP refutations checked by
  :mod:`exactmem.checker.proofs.drup`);
* :class:`Unknown` -- timeout, resource limit, or a model that could not be made rational.

Backends return :class:`Assignment` (exact values of the unknowns) instead of ``Found``;
the search layer turns it into a network and certifies it (:func:`certify_witness`: built
with :func:`exactmem.certificate.build_certificate`, verified by the trusted checker).
:class:`QueryResult` is one query's outcome with its JSON-ready summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import find_conflicting_duplicate, find_inconsistency
from exactmem.model.spec import NetworkSpec
from exactmem.search.question.shape import Shape, output_dim, params_of

CONSTRUCTION_NAME = "search"

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


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The outcome of one query with its JSON-ready summary."""

    shape: Shape
    params: int
    outcome: Outcome
    seconds: float
    certificate: dict[str, Any] | None = None
    certificate_path: str | None = None
    notes: tuple[str, ...] = field(default=())
    cnf: str | None = None  # bit-bounded infeasible: the DIMACS file and its LRAT proof
    proof: str | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())  # e.g. bits, conflicts

    @property
    def status(self) -> str:
        if isinstance(self.outcome, Found):
            return "found"
        return "infeasible" if isinstance(self.outcome, Infeasible) else "unknown"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": self.shape.as_dict(), "params": self.params,
                               "status": self.status, "seconds": round(self.seconds, 4)}
        if isinstance(self.outcome, Infeasible):
            out["proof_kind"] = self.outcome.proof_kind
            out["detail"] = self.outcome.detail
        elif isinstance(self.outcome, Unknown):
            out["reason"] = self.outcome.reason
        if self.certificate_path is not None:
            out["certificate"] = self.certificate_path
        if self.notes:
            out["notes"] = list(self.notes)
        if self.cnf is not None:
            out["cnf"], out["proof"] = self.cnf, self.proof
        out.update(dict(self.extra))
        return out


def consistency_conflict(ds: Dataset) -> str | None:
    """Why no network without positional information can memorize ``ds``, or ``None``."""
    pair = find_conflicting_duplicate(ds)
    if pair is not None:
        return f"sequences {pair[0]} and {pair[1]} are identical with different labels"
    bad = find_inconsistency(ds)
    if bad is not None:
        return (f"sequences {bad[0]} and {bad[1]} are equal up to a permutation with the same "
                f"last token but carry different labels (Kajitsuka & Sato eq. 5)")
    return None


def shape_params(ds: Dataset, shape: Shape) -> int:
    dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert dim is not None
    return params_of(shape, ds.inputs, dim, output_dim(ds, shape))


class TieOptions(Protocol):
    """What a certificate records of the encoding options (``EncodeOptions`` has it)."""

    @property
    def ties(self) -> str: ...


def certify_witness(ds: Dataset, shape: Shape, spec: Any, opts: TieOptions,
                    bits: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """Certificate of the witness and the checker's failures (empty when verified)."""
    from exactmem.certificate import build_certificate
    from exactmem.checker import check_certificate
    from exactmem.constructions.base import BuildResult

    params: dict[str, Any] = {"shape": shape.as_dict(), "ties": opts.ties}
    if bits is not None:
        params["bits"] = bits
    cert = build_certificate(ds, BuildResult(spec, params), CONSTRUCTION_NAME)
    report = check_certificate(cert)
    return cert, list(report.failures)
