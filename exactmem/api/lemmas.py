"""The lemma proofs of ``proofs/`` (``exactmem prove``): where their framework is found."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from exactmem.errors import MissingDependencyError


def framework() -> ModuleType:
    """The proof framework: ``exactmem._proofs`` when installed (a wheel, or an editable
    install that maps it to ``proofs/``), else the ``proofs/`` folder of this checkout."""
    name = "exactmem._proofs"
    try:
        return importlib.import_module(f"{name}.framework")
    except ModuleNotFoundError as exc:
        if exc.name not in (name, f"{name}.framework"):
            raise
    folder = Path(__file__).resolve().parents[2] / "proofs"
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None or not (folder / "framework.py").is_file():
        raise MissingDependencyError("the proofs are not part of this installation; "
                                     "reinstall exactmem or run from a checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.framework")
