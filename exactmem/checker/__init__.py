"""The trusted checker: standard library only, its own exact forward pass, never searches.
Two parts (docs/checker.md): certificates (:mod:`.verify`) and proofs (:mod:`.proofs`).
Usable on its own: copy this folder and run ``python -m <folder> CERT``."""

from typing import Any

__all__ = ["CheckReport", "check_certificate", "check_file"]


def __getattr__(name: str) -> Any:
    """The certificate checker, loaded on first use (docs/checker.md: closures)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import verify

    return getattr(verify, name)
