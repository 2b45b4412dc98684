"""What a proof obligation is, and how they are found and run.

Every module ``proofs/lemma_*.py`` defines ``LEMMAS: list[Lemma]``.  A lemma's ``check``
returns a :class:`Outcome`: ``proved`` (e.g. the negation is unsatisfiable for Z3, or a
symbolic identity holds for sympy), ``failed`` (with a counterexample) or ``unknown``
(timeout or resource limit — never reported as proved).
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

Status = Literal["proved", "failed", "unknown"]


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Lemma:
    """A named statement and the procedure that proves it."""

    name: str
    statement: str
    check: Callable[[], Outcome]


@dataclass(frozen=True, slots=True)
class Result:
    lemma: Lemma
    outcome: Outcome
    seconds: float

    def line(self) -> str:
        extra = f"  ({self.outcome.detail})" if self.outcome.detail else ""
        return f"{self.outcome.status:8s} {self.seconds:8.2f}s  {self.lemma.name}{extra}"


def discover() -> list[Lemma]:
    """All lemmas of all ``proofs/lemma_*.py`` modules, in module order."""
    import proofs

    found: list[Lemma] = []
    for info in sorted(pkgutil.iter_modules(proofs.__path__), key=lambda m: m.name):
        if info.name.startswith("lemma_"):
            module = importlib.import_module(f"proofs.{info.name}")
            found.extend(getattr(module, "LEMMAS", []))
    return found


def run(selected: str | None = None) -> Iterator[Result]:
    """Run every lemma (or those whose name contains ``selected``), yielding results."""
    for lemma in discover():
        if selected and selected not in lemma.name:
            continue
        start = time.perf_counter()
        try:
            outcome = lemma.check()
        except Exception as exc:  # a crashing proof is a failed proof, reported as such
            outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
        yield Result(lemma, outcome, time.perf_counter() - start)
