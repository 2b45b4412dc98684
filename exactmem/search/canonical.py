"""One grid point per function: moved to the trusted base
(:mod:`exactmem.checker.search_reps`), whose encoder writes the clauses; re-exported."""

from exactmem.checker.search_reps import (
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
