"""How many slices and processes a sharded check makes (standard library only); the
producer's sharded evaluation (exactmem/model/shards.py) uses the same plan."""

import os

MAX_SHARDS = 64  # slices of the sequences a sharded run makes, whatever K is asked


def shard_plan(shards: int, count: int) -> tuple[int, int]:
    """``(slices, processes)`` for ``count`` sequences asked in ``shards``: at most
    :data:`MAX_SHARDS` slices and never more than ``count`` (an empty slice is wasted
    work), at most one local process per CPU."""
    if type(shards) is not int or shards < 1:
        raise ValueError(f"shards: expected a positive integer, found {shards!r}")
    slices = max(1, min(shards, MAX_SHARDS, count))
    return slices, max(1, min(slices, os.cpu_count() or 1))
