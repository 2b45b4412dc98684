"""Search for minimal hardmax Transformers that memorize a dataset.

The wing is layered; each subpackage imports only the ones above it in this list
(``tests/cli/test_layering.py`` keeps it so):

* :mod:`~exactmem.search.question` -- what is asked and what an answer is (shapes,
  outcomes, labelling classes);
* :mod:`~exactmem.search.encode` -- a question as a formula (real weights) or a CNF
  (b-bit weights, built by the trusted encoder of :mod:`exactmem.checker.proofs`);
* :mod:`~exactmem.search.solvers` -- Z3, cvc5 and CaDiCaL, each imported lazily in its own
  module, and the cross-check of refutations;
* :mod:`~exactmem.search.finders` -- shortcuts that find networks fast and never decide
  infeasibility;
* :mod:`~exactmem.search.drive` -- queries, sweeps over shapes, the all-labellings runs.

See ``docs/search.md``.
"""

from exactmem.search.drive.query import run_query
from exactmem.search.drive.sweep import Limits, minimize
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.question.outcome import Found, Infeasible, Outcome, QueryResult, Unknown
from exactmem.search.question.shape import Shape, nests_in

__all__ = ["EncodeOptions", "Found", "Infeasible", "Limits", "Outcome", "QueryResult", "Shape",
           "Unknown", "encode", "minimize", "nests_in", "run_query"]
