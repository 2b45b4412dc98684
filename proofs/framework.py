"""What a proof obligation is, and how they are found and run.

Every module ``lemma_*.py`` of this package defines ``LEMMAS: list[Lemma]``.  A lemma's
``check`` returns a :class:`Outcome`: ``proved`` (e.g. the negation is unsatisfiable for Z3,
or a symbolic identity holds for sympy), ``failed`` (with a counterexample) or ``unknown``
(timeout or resource limit — never reported as proved).  A lemma may also have a ``quick``
check that proves a smaller instance of the statement (``exactmem prove --quick``); its
outcome says which instance.

Long checks report their steps with :func:`expect` and :func:`advance`; :func:`run` shows
them on stderr through :mod:`exactmem.progress`.

The package lives at the repository's top level as ``proofs/`` and is installed inside the
exactmem package as ``exactmem._proofs``; its modules import each other relatively.
It sits above exactmem: ``exactmem prove`` runs it as a program (``__main__.py``) and
exactmem never imports it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["proved", "failed", "unknown"]


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Lemma:
    """A named statement and the procedure that proves it (``quick``: a smaller instance)."""

    name: str
    statement: str
    check: Callable[[], Outcome]
    quick: Callable[[], Outcome] | None = None


@dataclass(frozen=True, slots=True)
class Result:
    lemma: Lemma
    outcome: Outcome
    seconds: float
    quick: bool = False

    def line(self) -> str:
        detail = ("quick: " if self.quick else "") + self.outcome.detail
        extra = f"  ({detail})" if detail else ""
        return f"{self.outcome.status:8s} {self.seconds:8.2f}s  {self.lemma.name}{extra}"


_current: dict[str, Any] = {"task": None}


def expect(total: int) -> None:
    """The running lemma will take ``total`` steps (shown as a progress bar or log lines)."""
    if _current["task"] is not None:
        _current["task"].update(0, total=total)


def advance(steps: int = 1) -> None:
    """The running lemma finished ``steps`` more steps."""
    if _current["task"] is not None:
        _current["task"].update(steps)


def discover() -> list[Lemma]:
    """All lemmas of all ``lemma_*.py`` modules of this package, in module order."""
    package = sys.modules[__package__ or "proofs"]
    found: list[Lemma] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("lemma_"):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found.extend(getattr(module, "LEMMAS", []))
    return found


def select(selected: str | None = None) -> list[Lemma]:
    """The lemmas whose name contains ``selected`` (``_`` read as ``-``); all for ``None``."""
    lemmas = discover()
    if not selected:
        return lemmas
    needle = selected.replace("_", "-")
    return [lemma for lemma in lemmas if needle in lemma.name]


def run(selected: str | None = None, *, quick: bool = False,
        lemmas: list[Lemma] | None = None) -> Iterator[Result]:
    """Run every lemma (or those whose name contains ``selected``), yielding results.

    With ``quick``, lemmas that have a quick check run it instead of the full one.
    """
    from exactmem import progress

    todo = select(selected) if lemmas is None else lemmas
    for i, lemma in enumerate(todo, 1):
        use_quick = quick and lemma.quick is not None
        check = lemma.quick if use_quick and lemma.quick is not None else lemma.check
        start = time.perf_counter()
        with progress.task(f"prove [{i}/{len(todo)}] {lemma.name}", unit="step",
                           heartbeat=True) as task:
            _current["task"] = task
            try:
                outcome = check()
            except Exception as exc:  # a crashing proof is a failed proof, reported as such
                outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
            finally:
                _current["task"] = None
        yield Result(lemma, outcome, time.perf_counter() - start, use_quick)
