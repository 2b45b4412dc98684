"""Every error exactmem raises on purpose derives from :class:`ExactmemError`.

Specific errors also subclass the fitting built-in, so callers may catch either.
Messages name what was expected and what was found.
"""

from __future__ import annotations


class ExactmemError(Exception):
    """Root of all exactmem errors."""


class NotExactError(ExactmemError, TypeError):
    """A float (or another inexact number) tried to enter the certified path."""


class DatasetError(ExactmemError, ValueError):
    """A dataset file or object is malformed or violates a stated rule."""


class InconsistentLabelsError(DatasetError):
    """Two sequences that no permutation-equivariant model can tell apart carry different labels.

    ``pair`` holds the two offending sequence indices.
    """

    def __init__(self, message: str, pair: tuple[int, int]) -> None:
        super().__init__(message)
        self.pair = pair


class AssumptionError(ExactmemError, ValueError):
    """A dataset violates an assumption of the theorem a construction implements."""


class SpecError(ExactmemError, ValueError):
    """A network specification is malformed (shapes, kinds, fields)."""


class NeedsRigorousSoftmaxError(ExactmemError, NotImplementedError):
    """A softmax layer with non-constant scores cannot be evaluated exactly over the rationals."""


class CertificateError(ExactmemError, ValueError):
    """A certificate file cannot be read or does not follow the format."""


class ConstructionError(ExactmemError, ValueError):
    """A construction failed to build, or was asked for something it does not support."""


class UnknownConstructionError(ConstructionError, KeyError):
    """No construction is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(ExactmemError, ImportError):
    """An optional dependency (a solver, torch, onnx ...) is not installed."""


class OutputError(ExactmemError, OSError):
    """An output file cannot be written (missing folder, no permission, full disk ...)."""
