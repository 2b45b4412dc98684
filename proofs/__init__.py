"""Proof obligations of exactmem's gadgets and bounds, re-checked by ``exactmem prove``."""
