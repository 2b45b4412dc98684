"""A function run in a child made by ``os.fork``, its result pickled back through a pipe.

The child shares the parent's memory page by page until it writes to a page, so the
arguments (a network, a dataset, a range of points) are not copied through the pipe:
objects alive at the fork are moved out of the cyclic collector's reach first
(``gc.freeze``, so the child's collections do not touch, and copy, the parent's pages).
The child reports nothing on the terminal (another thread may hold the terminal's lock at
the fork) and leaves with ``os._exit``; its result, or its exception (as an
:class:`ExactmemError` naming it when it does not pickle), comes back pickled and is
returned or raised in the parent.  POSIX only (:func:`usable`).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from exactmem.errors import ExactmemError

READER = "forked: result"  # the name of the thread that drains a child's pipe


def usable(*, alone: bool = False) -> bool:
    """Whether ``os.fork`` exists here; with ``alone``, also that no other thread runs here
    than the main one and the readers of earlier children (a fork copies only the calling
    thread, and a lock another thread holds would stay held in the child; a reader holds
    only its own pipe, which a later child never reads)."""
    return hasattr(os, "fork") and sys.platform != "win32" and (
        not alone or all(t is threading.main_thread() or t.name == READER
                         for t in threading.enumerate()))


class Forked:
    """``fn(*args)`` running in a forked child; :meth:`result` waits for it."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        read, write = os.pipe()
        gc.collect()
        gc.freeze()  # the child's collector leaves the parent's objects (and pages) alone
        try:
            pid = os.fork()
        except BaseException:
            gc.unfreeze()
            raise
        if pid != 0:  # the parent collects its objects again; the child keeps them frozen
            gc.unfreeze()
        if pid == 0:  # the child: compute, send, leave without running the parent's exits
            os.close(read)
            code = 0
            try:
                payload = pickle.dumps((True, fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # noqa: BLE001 - raised again in the parent
                code = 1
                try:
                    payload = pickle.dumps((False, exc))
                except Exception:  # noqa: BLE001 - an exception that does not pickle
                    payload = pickle.dumps((False, ExactmemError(f"{type(exc).__name__}: "
                                                                 f"{exc}")))
            try:
                with os.fdopen(write, "wb") as out:
                    out.write(payload)
            finally:
                os._exit(code)
        os.close(write)
        self._pid = pid
        self._status: int | None = None
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, args=(read,), daemon=True,
                                        name=READER)
        self._reader.start()  # drains the pipe, so the child never waits on a full one

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as src:
            while chunk := src.read(1 << 20):
                self._chunks.append(chunk)

    def result(self) -> Any:
        """The child's return value, or its exception raised here."""
        self._reader.join()
        self._reap()
        data = b"".join(self._chunks)
        if not data:
            raise ExactmemError(f"a forked child ended without a result (status "
                                f"{self._status})")
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value

    def _reap(self) -> None:
        if self._status is None:
            self._status = os.waitpid(self._pid, 0)[1]

    def close(self) -> None:
        """Stop the child if it still runs (the parent gave up: an error or an interrupt)."""
        if self._status is None:
            try:
                os.kill(self._pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self._reap()
