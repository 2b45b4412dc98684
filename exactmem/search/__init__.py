"""Search for minimal hardmax Transformers that memorize a dataset (Z3 backend).

The encoding is solver-independent (:mod:`~exactmem.search.formula`,
:mod:`~exactmem.search.encoding`); :mod:`~exactmem.search.z3_backend` is the only module
importing a solver.  See ``docs/search.md``.
"""

from exactmem.search.encoding import EncodeOptions, encode
from exactmem.search.outcome import Found, Infeasible, Outcome, Unknown
from exactmem.search.query import QueryResult, run_query
from exactmem.search.shape import Shape, nests_in
from exactmem.search.sweep import Limits, minimize

__all__ = ["EncodeOptions", "Found", "Infeasible", "Limits", "Outcome", "QueryResult", "Shape",
           "Unknown", "encode", "minimize", "nests_in", "run_query"]
