"""Optional dependencies, in one place: which extra installs each package, and the one error
a missing one gives (:class:`~exactmem.errors.MissingDependencyError`)::

    export --format onnx needs the 'onnx' package, which is not installed:
    pip install 'exactmem[export]'

:func:`require` imports a module of an optional package, :func:`need` checks that a
package is installed without importing it, :func:`missing` is the error itself.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from exactmem.errors import MissingDependencyError, SpecError

#: the optional packages (by import name), and the extra of pyproject.toml that installs each
EXTRAS = {"torch": "export", "safetensors": "export", "onnx": "export",
          "onnxruntime": "export", "matplotlib": "plot", "scipy": "lp", "dask": "dask",
          "distributed": "dask", "transformers": "trained"}
#: packages that no extra installs (solvers, or dependencies a broken install may lack):
#: their pip name
PIP_NAMES = {"cvc5": "cvc5", "z3": "z3-solver", "pysat": "python-sat", "flint": "python-flint",
             "gmpy2": "gmpy2"}


def install_hint(package: str, extra: str | None = None) -> str:
    """The command that installs ``package`` (an import name): through ``extra`` when given
    (a package several extras install, named by the job: ``trained`` for torch when a
    checkpoint is read), else through the extra of :data:`EXTRAS`, else by its pip name."""
    extra = extra or EXTRAS.get(package)
    if extra is not None:
        return f"pip install 'exactmem[{extra}]'"
    return f"pip install {PIP_NAMES.get(package, package)}"


def missing(package: str, what: str, extra: str | None = None) -> MissingDependencyError:
    """The error for ``what`` needing the optional ``package``, naming how to install it
    (:func:`install_hint`)."""
    package = package.split(".")[0]
    return MissingDependencyError(f"{what} needs the '{package}' package, which is not "
                                  f"installed: {install_hint(package, extra)}")


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` of an optional package or raise :func:`missing`'s error."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module, what, extra) from exc


def need(package: str, what: str, extra: str | None = None) -> None:
    """Raise :func:`missing`'s error unless ``package`` is installed (without importing it)."""
    try:
        found = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise missing(package, what, extra)


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
