"""One grid point per function: moved to the trusted base
(:mod:`exactmem.checker.proofs.search_reps`), whose encoder writes the clauses; re-exported."""

from exactmem.checker.proofs.search_reps import (
                                          MAX_COMBOS,
                                          applies,
                                          excluded,
                                          grid_values,
                                          head_key,
                                          representatives,
                                          unit_key,
)

__all__ = ["MAX_COMBOS", "applies", "excluded", "grid_values", "head_key", "representatives",
           "unit_key"]
