"""The verdicts (docs/checker.md): ``s VERIFIED`` (exit 0), ``s REJECTED`` (1: a claim fails),
``s UNUSABLE`` (2: unreadable input, a limit, or the checker stopped); their exceptions."""

from collections.abc import Iterable
from typing import Any

VERDICTS = {0: "s VERIFIED", 1: "s REJECTED", 2: "s UNUSABLE"}


class Unusable(Exception):
    """The input cannot be read: not the format, a field malformed, a limit exceeded."""


class Rejected(Exception):
    """A step of a proof does not hold: the verdict ``s REJECTED``."""


class CheckReport:
    """The one report of every check: ``failures`` (every reason, in order), ``unusable``,
    ``claim`` (what a verified input proves), ``counts``, ``totals`` (what shards add up),
    ``lines``.  With ``rejected_first`` (a search answer) a failed claim outweighs the rest."""

    def __init__(self, failures: Iterable[str] = (), unusable: bool = False,
                 claim: str | None = None, counts: dict[str, int] | None = None) -> None:
        self.failures, self.unusable, self.claim = list(failures), unusable, claim
        self.counts, self.lines = dict(counts or {}), list[str]()
        self.totals: Any = None
        self.rejected = self.rejected_first = False

    def reject(self, reason: str) -> None:
        self.failures.append(reason)
        self.rejected = True

    def refuse(self, reason: str) -> None:
        self.failures.append(reason)
        self.unusable = True

    @property
    def exit_code(self) -> int:
        if self.rejected_first and self.rejected:
            return 1
        return 2 if self.unusable else (1 if self.failures else 0)

    @property
    def verified(self) -> bool:
        return self.exit_code == 0

    @property
    def verdict(self) -> str:
        """The one stdout line: ``s VERIFIED``, ``s REJECTED`` or ``s UNUSABLE``."""
        return VERDICTS[self.exit_code]

    @property
    def reasons(self) -> list[str]:
        return self.failures


def failure(exc: BaseException) -> CheckReport:
    """The verdict of a proof check stopped by ``exc`` (a rejected step, or unusable)."""
    if isinstance(exc, Rejected):
        return CheckReport([str(exc)])
    if isinstance(exc, Unusable):
        return CheckReport([str(exc)], unusable=True)
    return CheckReport([f"resource limit: {type(exc).__name__}"], unusable=True)
