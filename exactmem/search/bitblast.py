"""The bit-blaster now lives in the trusted base (:mod:`exactmem.checker.proofs.search_circuit`):
the CNF a refutation is about is built by the checker's own encoder.  Re-exported here for
the search's solver-side circuits."""

from exactmem.checker.proofs.search_circuit import Circuit, Int, width

__all__ = ["Circuit", "Int", "width"]
