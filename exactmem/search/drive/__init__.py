"""The drivers: one query, sweeps over shapes, the all-labellings runs and their executors
(the top layer of the search wing)."""
