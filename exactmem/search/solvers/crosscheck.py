"""Second opinions on a real-valued refutation.

Z3's UNSAT on nonlinear real arithmetic cannot be replayed, so every refutation of
``exactmem search`` (real weights) is asked again, each under a deterministic resource
limit:

* **enc2**: Z3 on the *other* encoding -- the multiset encoding
  (:mod:`exactmem.search.encode.encoding`) and the sequence-by-sequence encoding
  (:mod:`exactmem.search.encode.encoding_positions`) are written independently, so a bug in one
  shows up as a disagreement;
* **cvc5**: a solver with a different code base on the first encoding
  (:func:`exactmem.search.solvers.cvc5_backend.refutes`).

The verdict's ``proof_kind`` names who agreed: ``"z3"``, ``"z3+enc2"``, ``"z3+cvc5"`` or
``"z3+enc2+cvc5"``.  Any ``sat`` among the second opinions is a disagreement: the answer
becomes ``unknown`` with the reason.  A second opinion that gives no answer within its
limit (``unknown``) adds nothing and takes nothing away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from exactmem.errors import MissingDependencyError
from exactmem.model.dataset import Dataset
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.encode.encoding_positions import encode_positions
from exactmem.search.encode.formula import Problem
from exactmem.search.question.outcome import Assignment, Infeasible, Outcome, Unknown
from exactmem.search.question.shape import Shape

EncodingName = Literal["multiset", "positions"]
ENCODINGS: tuple[str, ...] = ("multiset", "positions")
DEFAULT_ENCODING: EncodingName = "positions"
DEFAULT_CVC5_RLIMIT = 20_000


def encode_with(name: str, ds: Dataset, shape: Shape, opts: EncodeOptions) -> Problem:
    """The problem of ``shape`` memorizing ``ds`` in the encoding called ``name``."""
    if name == "multiset":
        return encode(ds, shape, opts)
    if name == "positions":
        return encode_positions(ds, shape, opts)
    raise ValueError(f"encoding must be one of {ENCODINGS}, found {name!r}")


def other_encoding(name: str) -> str:
    return "multiset" if name == "positions" else "positions"


@dataclass(frozen=True, slots=True)
class Verdicts:
    """The second opinions on one refutation: ``"unsat"``, ``"sat"``, ``"unknown"`` or
    ``"skipped"`` (not asked: cvc5 not installed, or cross-checks off)."""

    enc2: str
    cvc5: str

    def outcome(self, first: Infeasible, first_name: str = "z3") -> Outcome:
        disagree = [who for who, v in (("enc2", self.enc2), ("cvc5", self.cvc5)) if v == "sat"]
        if disagree:
            return Unknown(f"disagreement: {first_name} refuted the first encoding but "
                           + " and ".join(f"{w} found it satisfiable" for w in disagree))
        kind = first_name + "".join(f"+{w}" for w, v in (("enc2", self.enc2), ("cvc5", self.cvc5))
                              if v == "unsat")
        return Infeasible(kind, first.detail)

    def as_dict(self) -> dict[str, str]:
        return {"enc2": self.enc2, "cvc5": self.cvc5}


def second_opinions(ds: Dataset, shape: Shape, opts: EncodeOptions, encoding: str,
                    problem: Problem, timeout_s: float, rlimit: int | None,
                    cvc5_rlimit: int | None, seed: int = 0) -> Verdicts:
    """Ask Z3 on the other encoding (``rlimit``) and cvc5 on ``problem`` (``cvc5_rlimit``;
    ``None`` skips cvc5)."""
    from exactmem.search.solvers import z3_backend

    other = z3_backend.solve(encode_with(other_encoding(encoding), ds, shape, opts),
                             max(timeout_s, 0.001), seed=seed, rlimit=rlimit, rationalise=False)
    enc2 = "unsat" if isinstance(other, Infeasible) else \
        "sat" if isinstance(other, Assignment) else "unknown"
    return Verdicts(enc2, cvc5_opinion(problem, cvc5_rlimit))


def cvc5_opinion(problem: Problem, cvc5_rlimit: int | None) -> str:
    """cvc5's answer on ``problem``, or ``"skipped"`` (no limit given, or no cvc5)."""
    if cvc5_rlimit is None:
        return "skipped"
    try:
        from exactmem.search.solvers import cvc5_backend

        return cvc5_backend.refutes(problem, cvc5_rlimit)
    except MissingDependencyError:
        return "skipped"
