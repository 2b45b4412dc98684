"""What every entry point of the checker shares (docs/checker.md, "Entry points"): it
fails closed, and every verdict names the checker that gave it.

* :func:`answer` runs a check and prints its verdict on stdout: the line
  ``c checker: sha256 <hex>``, then the one ``s`` line, last (a SAT solver's ``c``/``s``
  convention: the claim, the checker and the verdict travel together); an unexpected
  exception anywhere in the check is the verdict ``s UNUSABLE`` with exit 2 (never 1, which
  means rejected), and so is a checker that cannot hash its own files.
* :func:`checker_sha256` is the SHA-256 of the checker's own source files: every ``*.py``
  file under the folder of this module (``exactmem/checker/``, sub-folders included),
  ordered by path relative to that folder in POSIX form, compared as strings; for each,
  in that order, the hash reads the path (UTF-8), a NUL byte, the file's length in bytes
  as a decimal ASCII number, a NUL byte, then the file's bytes.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .verdict import VERDICTS

ROOT = Path(__file__).resolve().parent


class Verdict(Protocol):
    """What a check returns: its ``s`` line and exit code."""

    @property
    def verdict(self) -> str: ...

    @property
    def exit_code(self) -> int: ...


def sources(root: Path = ROOT) -> list[str]:
    """The checker's source files, as paths relative to ``root``, in hashing order."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())


def checker_sha256(root: Path = ROOT) -> str:
    """The SHA-256 (hex) over :func:`sources`, as the module docstring defines it."""
    h = hashlib.sha256()
    for name in sources(root):
        data = (root / name).read_bytes()
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return h.hexdigest()


def checker_line() -> str:
    """``c checker: sha256 <hex>``: which checker gave the verdict."""
    return f"c checker: sha256 {checker_sha256()}"


def _stopped(exc: Exception) -> None:
    print(f"c the checker stopped: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)


def answer(check: Callable[[], Verdict]) -> int:
    """Run ``check`` (it prints its reasons and claim), then print the checker line and the
    verdict on stdout; return the exit code.  Any exception the check raises is the verdict
    ``s UNUSABLE`` (exit 2), with its name on stderr."""
    try:
        report = check()
        verdict, code = report.verdict, report.exit_code
        if VERDICTS.get(code) != verdict:
            raise ValueError(f"the verdict {verdict!r} with exit code {code}")
    except Exception as exc:  # fail closed: a crash is never a verdict of its own
        _stopped(exc)
        verdict, code = VERDICTS[2], 2
    try:
        line = checker_line()
    except Exception as exc:  # a verdict names its checker, or is no verdict
        _stopped(exc)
        line, verdict, code = "c checker: sha256 unknown", VERDICTS[2], 2
    print(line, flush=True)
    print(verdict, flush=True)
    return code
