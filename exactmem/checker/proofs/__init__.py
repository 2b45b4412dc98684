"""The proof side of the trusted checker (standard library only; docs/proof-checker.md).

* :mod:`.drup`, :mod:`.lrat`: "this DIMACS CNF is unsatisfiable" (DRUP/DRAT, standard LRAT);
* :mod:`.search_circuit`, :mod:`.search_reps`, :mod:`.search_encode`: the one encoder of a
  bit-bounded search question as CNF (the search writes its CNF with it);
* :mod:`.search_check`: a whole search answer, each infeasible size's CNF re-derived from its
  question and compared byte for byte, each found size checked as a certificate;
  :mod:`.search_claims` its summary and texts, recomputed; :mod:`.search_store` the
  results store of an ``--all-labelings`` run, record by record.
"""
