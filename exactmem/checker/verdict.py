"""The verdicts (docs/checker.md): ``s VERIFIED`` (exit 0), ``s REJECTED`` (1: a claim fails),
``s UNUSABLE`` (2: unreadable input, a limit, or the checker stopped); their exceptions."""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICTS = {0: "s VERIFIED", 1: "s REJECTED", 2: "s UNUSABLE"}


class Unusable(Exception):
    """The input cannot be read: not the format, a field malformed, a limit exceeded."""


class Rejected(Exception):
    """A step of a proof does not hold: the verdict ``s REJECTED``."""


@dataclass(frozen=True, slots=True)
class ProofReport:
    """The verdict of a proof check, its reasons and counts."""

    verdict: str  # "s VERIFIED" | "s REJECTED" | "s UNUSABLE"
    reasons: tuple[str, ...] = field(default=())
    lemmas: int = 0
    deletions: int = 0
    checked: int = 0  # lemmas in the core, each checked

    @property
    def exit_code(self) -> int:
        return {"s VERIFIED": 0, "s REJECTED": 1}.get(self.verdict, 2)


def failure(exc: BaseException) -> ProofReport:
    """The verdict of a check stopped by ``exc``: a rejected step, unusable input, or a
    resource limit."""
    if isinstance(exc, Rejected):
        return ProofReport("s REJECTED", (str(exc),))
    if isinstance(exc, Unusable):
        return ProofReport("s UNUSABLE", (str(exc),))
    return ProofReport("s UNUSABLE", (f"resource limit: {type(exc).__name__}",))
