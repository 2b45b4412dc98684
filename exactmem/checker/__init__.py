"""The trusted checker: standard library only, its own exact forward pass, never searches.

Two parts (docs/checker.md): the certificate checker in this folder (:mod:`.verify`, the
forward pass, rigorous softmax and language-model bounds, float-exact claims;
docs/certificate-format.md) and the proof checker in :mod:`.proofs` (CNF, LRAT, the search
re-encoder; docs/proof-checker.md).  Usable without the rest of exactmem: copy this folder
and run ``python -m <folder> CERT``.
"""

from typing import Any

__all__ = ["CheckReport", "check_certificate", "check_file"]


def __getattr__(name: str) -> Any:
    """The certificate checker's entry points, loaded on first use, so that importing a
    part (the proof checker, say) does not load the rest (docs/checker.md: closures)."""
    if name == "CheckReport":
        from .report import CheckReport

        return CheckReport
    if name in ("check_certificate", "check_file"):
        from . import verify

        return getattr(verify, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
