"""The solvers (Z3, cvc5, CaDiCaL), each imported lazily in its own module, and the
cross-check of refutations (imports only the question and encode layers)."""
