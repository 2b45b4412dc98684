"""What a construction is: a named builder from a dataset to an exact :class:`NetworkSpec`.

Each construction lives in its own module of :mod:`exactmem.constructions` and exposes a
module-level ``CONSTRUCTION``; the registry finds them by scanning the package, so adding
a construction never edits a shared file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec


@dataclass(frozen=True, slots=True)
class Option:
    """A construction parameter, exposed on the command line as ``--NAME``."""

    name: str
    type: type
    default: Any
    help: str


@dataclass(frozen=True, slots=True)
class BuildResult:
    """The built network, the parameters actually used (JSON values) and notes for the user."""

    spec: NetworkSpec
    params: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    hints: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Construction:
    """A registered construction.

    ``build(dataset, options)`` returns a :class:`BuildResult`; ``bound(N, n, d, C)``, when
    given, returns the theorem's size bound for ``exactmem info``; ``claims``: the
    float-exact / integer claims ``certify`` makes without ``--float-exact``
    (docs/float-exact.md).
    """

    name: str
    summary: str
    reference: str
    tasks: tuple[str, ...]
    inputs: tuple[str, ...]
    build: Callable[[Dataset, Mapping[str, Any]], BuildResult]
    options: tuple[Option, ...] = ()
    bound: Callable[..., Mapping[str, Any]] | None = None
    claims: tuple[str, ...] = ()  # the exactness claims certify makes by default


    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}
