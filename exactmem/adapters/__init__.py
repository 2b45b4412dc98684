"""Adapters: the certified network in the float formats users load, and how well it survives.

* :mod:`exactmem.adapters.torch`: ``to_torch`` / ``from_torch`` (the only torch import);
* :mod:`exactmem.adapters.safetensors_io`: safetensors files bound to the certificate;
* :mod:`exactmem.adapters.onnx_export`: an ONNX graph of MatMul/Softmax-level primitives;
* :mod:`exactmem.adapters.mpfr_eval`: the forward pass in ``p``-bit floating point (MPFR);
* :mod:`exactmem.adapters.precision`: the float fidelity report and minimal mantissa bits.

Import the submodule you need; importing this package loads neither torch nor onnx.
torch, safetensors, onnx and onnxruntime come with the ``export`` extra, matplotlib with
``plot``; a missing one is a :class:`~exactmem.errors.MissingDependencyError` that names
the extra (:func:`require`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from exactmem.errors import MissingDependencyError, SpecError

#: the optional packages, and the extra that installs each
EXTRAS = {"torch": "export", "safetensors": "export", "onnx": "export",
          "onnxruntime": "export", "matplotlib": "plot"}


def missing(package: str, what: str) -> MissingDependencyError:
    """The error for ``what`` needing the optional ``package``, naming the extra."""
    extra = EXTRAS.get(package, "all")
    return MissingDependencyError(f"{what} needs the '{package}' package, which is not "
                                  f"installed: pip install 'exactmem[{extra}]'")


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` of an optional package or raise :func:`missing`'s error."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module.split(".")[0], what) from exc


def need(package: str, what: str) -> None:
    """Raise :func:`missing`'s error unless ``package`` is installed (without importing it)."""
    try:
        found = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise missing(package.split(".")[0], what)


def reads_as(path: Path, reader: Callable[[Path], object]) -> bool:
    """Whether ``reader`` (a checkpoint reader that raises SpecError or
    MissingDependencyError on what it cannot read) reads the file ``path``."""
    if not path.is_file():
        return False
    try:
        reader(path)
    except (SpecError, MissingDependencyError):
        return False
    return True
