"""Where queries run: in this process, in local worker processes, or on a Dask cluster.

Every executor takes JSON payloads and yields JSON results *as they complete* (any
order), so the caller can stream them to disk.  ``close(cancel=True)`` drops what has not
started (used on ``Ctrl-C``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from exactmem.errors import MissingDependencyError

Payload = dict[str, Any]
Worker = Callable[[Payload], Payload]


class SerialExecutor:
    """Run queries one after another in this process."""

    name = "serial"

    def run(self, fn: Worker, payloads: Iterable[Payload]) -> Iterator[Payload]:
        for p in payloads:
            yield fn(p)

    def close(self, cancel: bool = False) -> None:
        return None


class ProcessExecutor:
    """A pool of local worker processes (the default)."""

    name = "processes"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.pool = cf.ProcessPoolExecutor(max_workers=self.workers)

    def run(self, fn: Worker, payloads: Iterable[Payload]) -> Iterator[Payload]:
        futures = [self.pool.submit(fn, p) for p in payloads]
        try:
            for fut in cf.as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def close(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class DaskExecutor:
    """Queries as tasks on a Dask cluster (``distributed.Client(address)``)."""

    name = "dask"

    def __init__(self, scheduler: str) -> None:
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - distributed is a dependency
            raise MissingDependencyError("--executor dask needs the 'distributed' package") \
                from exc
        self.client = Client(scheduler)

    def run(self, fn: Worker, payloads: Iterable[Payload]) -> Iterator[Payload]:
        from distributed import as_completed

        futures = [self.client.submit(fn, p, pure=False) for p in payloads]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def close(self, cancel: bool = False) -> None:
        self.client.close()


Executor = SerialExecutor | ProcessExecutor | DaskExecutor


def make_executor(kind: str = "processes", workers: int | None = None,
                  scheduler: str | None = None) -> Executor:
    if kind == "dask":
        if not scheduler:
            raise MissingDependencyError("--executor dask needs --scheduler ADDRESS")
        return DaskExecutor(scheduler)
    if kind == "serial" or workers == 1:
        return SerialExecutor()
    if kind != "processes":
        raise ValueError(f"executor must be 'processes', 'serial' or 'dask', found {kind!r}")
    return ProcessExecutor(workers)
