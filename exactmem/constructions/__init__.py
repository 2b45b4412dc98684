"""Constructions: one theorem per module, found by scanning this package.

Every module that defines a module-level ``CONSTRUCTION`` (a
:class:`~exactmem.constructions.base.Construction`) is registered under its name.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import UnknownConstructionError


@cache
def registry() -> dict[str, Construction]:
    """All constructions, by CLI name."""
    found: dict[str, Construction] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        c = getattr(module, "CONSTRUCTION", None)
        if isinstance(c, Construction):
            found[c.name] = c
    return dict(sorted(found.items()))


def get(name: str) -> Construction:
    reg = registry()
    if name not in reg:
        raise UnknownConstructionError(
            f"no construction named {name!r}; available: {', '.join(reg) or 'none'}")
    return reg[name]


__all__ = ["BuildResult", "Construction", "Option", "get", "registry"]
