"""Where queries run: in this process, in local worker processes, or on a Dask cluster.

Every executor takes JSON payloads and yields JSON results *as they complete* (any
order), so the caller can stream them to disk.  ``close(cancel=True)`` drops what has not
started (used on ``Ctrl-C``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
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


def _die_with_parent(parent: int) -> None:
    """Pool initializer: end this worker when the driver dies, even by ``kill -9``.

    On Linux the kernel sends SIGKILL when the parent exits (``PR_SET_PDEATHSIG``); a
    daemon thread that notices a changed parent id covers the rest (a solver call in a
    foreign library releases the interpreter lock, so the thread runs meanwhile).  With
    ``EXACTMEM_WORKER_LOG=PATH`` each worker appends its process id to PATH once started.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:
        os._exit(1)
    log = os.environ.get("EXACTMEM_WORKER_LOG")
    if log:  # observable worker start: one "PID" line each (a FIFO in the tests)
        with open(log, "a", encoding="ascii") as fh:
            fh.write(f"{os.getpid()}\n")

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exactmem-parent-watch").start()


class ProcessExecutor:
    """A pool of local worker processes (the default); workers die with the driver."""

    name = "processes"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.pool = cf.ProcessPoolExecutor(max_workers=self.workers,
                                           initializer=_die_with_parent,
                                           initargs=(os.getpid(),))

    def run(self, fn: Worker, payloads: Iterable[Payload]) -> Iterator[Payload]:
        """Payloads are drawn lazily, one per free worker, so a payload built by a
        generator sees every result yielded before it (witness transfer uses this)."""
        it = iter(payloads)
        running: set[cf.Future[Payload]] = set()
        try:
            while True:
                while len(running) < self.workers:
                    p = next(it, None)
                    if p is None:
                        break
                    running.add(self.pool.submit(fn, p))
                if not running:
                    return
                done, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in running:
                fut.cancel()

    def close(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class DaskExecutor:
    """Queries as tasks on a Dask cluster (``distributed.Client(address)``)."""

    name = "dask"

    def __init__(self, scheduler: str) -> None:
        from exactmem.optional import require

        self.client = require("distributed", "--executor dask").Client(scheduler)

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
