"""The lemma proofs of ``proofs/`` (``exactmem prove``), run as a program.

``proofs/`` sits above the package: it imports exactmem, and exactmem never imports it
(no import, no load by path; ``tests/cli/test_layering.py`` holds both).  This module starts
it as a separate Python process, ``python -m exactmem._proofs`` in an installation
(setup.py installs the folder there) or ``python -m proofs`` in a checkout (the folder
beside ``exactmem/``), with the ``exactmem`` this process runs first on the path, and
reads its ``--json`` lines (``proofs/__main__.py``).  Progress goes straight to stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactmem import progress
from exactmem.errors import ExactmemError, MissingDependencyError

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the exactmem package


class _EmptySelection(ExactmemError):
    """The program's selection is empty (its ``{"error"}`` line)."""


@dataclass(frozen=True, slots=True)
class Lemma:
    """A lemma of ``proofs/``: its name and statement."""

    name: str
    statement: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # proved, failed or unknown
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Result:
    """One lemma run; ``text`` is the program's line for it."""

    lemma: Lemma
    outcome: Outcome
    seconds: float
    quick: bool = False
    text: str = ""

    def line(self) -> str:
        return self.text


class ProofsProgram:
    """The proofs program ``python -m MODULE`` (``module``: ``proofs`` or
    ``exactmem._proofs``), with the listing, selection and run of ``proofs/framework.py``."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._all: list[Lemma] | None = None

    def _start(self, args: list[str]) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH"))
                                            if p)
        if progress.is_quiet():
            env["EXACTMEM_QUIET"] = "1"
        # -P: the current folder is not put on the path, so the program found is ours
        return subprocess.Popen([sys.executable, "-P", "-m", self.module, "--json", *args],
                                stdout=subprocess.PIPE, stderr=None, text=True, env=env)

    def _lines(self, args: list[str]) -> Iterator[dict[str, Any]]:
        proc = self._start(args)
        assert proc.stdout is not None
        expected = 0  # the program exits 1 exactly when a lemma it ran is not proved
        try:
            for raw in proc.stdout:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise ExactmemError("the proofs program wrote a line that is not JSON: "
                                        f"{raw[:80]!r}") from None
                if "error" in obj:
                    raise _EmptySelection(obj["error"])
                expected |= obj.get("status", "proved") != "proved"
                yield obj
            if proc.wait() != expected:
                raise ExactmemError(f"the proofs program ({sys.executable} -m {self.module}) "
                                    f"exited with status {proc.returncode}")
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
            proc.stdout.close()

    def discover(self) -> list[Lemma]:
        """Every lemma, in the program's order."""
        if self._all is None:
            self._all = self.select(None)
        return list(self._all)

    def select(self, selected: str | None = None) -> list[Lemma]:
        """The lemmas whose name contains ``selected`` (``_`` read as ``-``), all for
        ``None``; none when nothing matches."""
        try:
            return [Lemma(o["name"], o["statement"])
                    for o in self._lines(["--list", *([selected] if selected else [])])]
        except _EmptySelection:
            if selected:
                return []
            raise

    def run(self, selected: str | None = None, *, quick: bool = False,
            lemmas: list[Lemma] | None = None) -> Iterator[Result]:
        """Run the lemmas (those named, else those whose name contains ``selected``),
        yielding each result as the program finishes it."""
        args = ["--quick"] if quick else []
        if lemmas is not None:
            args += [a for lemma in lemmas for a in ("--name", lemma.name)]
        elif selected:
            args.append(selected)
        by_name = {lemma.name: lemma for lemma in lemmas or []}
        for o in self._lines(args):
            yield Result(by_name.get(o["name"], Lemma(o["name"])),
                         Outcome(o["status"], o["detail"]), float(o["seconds"]),
                         bool(o["quick"]), o["line"])


def framework() -> ProofsProgram:
    """The proofs program: ``exactmem._proofs`` when installed inside the package, else the
    ``proofs/`` folder of this checkout."""
    if (ROOT / "exactmem" / "_proofs" / "__main__.py").is_file():
        return ProofsProgram("exactmem._proofs")
    if (ROOT / "proofs" / "__main__.py").is_file():
        return ProofsProgram("proofs")
    raise MissingDependencyError("the proofs are not part of this installation; "
                                 "reinstall exactmem or run from a checkout")
