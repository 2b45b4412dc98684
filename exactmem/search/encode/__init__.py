"""A question as a formula over the real weights or as a CNF over b-bit weights (imports
only :mod:`exactmem.search.question` of the search wing)."""
