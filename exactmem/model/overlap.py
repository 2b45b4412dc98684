"""The producer's exact evaluation in a forked process, beside the independent check.

A certificate claims the outputs of its network; for a network that memorizes its dataset
those are the labels (the scalar output ``y``, or class ``y``).  So :mod:`exactmem.pipeline`
can write the certificate with the labels as its claims, start the checker on it, and run
the producer's own evaluation at the same time on the other core: when the evaluation's
predictions equal the claims, the certificate the checker verified is byte for byte the
one the evaluation gives (:func:`labels_as_predictions`); when they differ, the pipeline
builds the certificate from the evaluation and checks that one, as without the overlap.
Both proofs run in full either way; only their order changes.

The evaluation runs in a child made by ``os.fork`` (the network and dataset are not
copied through a pipe): objects alive at the fork are moved out of the cyclic collector's
reach first (``gc.freeze``, so the child's collections do not touch, and copy, the
parent's pages), the child reports nothing on the terminal (another thread may hold the
terminal's lock at the fork) and leaves with ``os._exit``; its result, or its exception (as
an :class:`ExactmemError` naming it when it does not pickle), comes back pickled through a
pipe and is returned or raised in the parent.  POSIX only: elsewhere, below
:data:`MIN_POSITIONS`, or with too little memory available, the pipeline evaluates first
and checks after, as before (also with ``EXACTMEM_OVERLAP=0``).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from exactmem.errors import ExactmemError
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import Evaluation

MIN_POSITIONS = 1 << 17  # read positions below which a fork costs more than it saves
MEMORY_FACTOR = 2  # available memory, in multiples of the process's peak, to fork


def available(positions: int) -> bool:
    """Whether to overlap an evaluation of ``positions`` read positions with the check:
    ``EXACTMEM_OVERLAP`` is not 0, ``EXACTMEM_JOBS`` is not 1, ``os.fork`` exists, at least
    two CPUs, enough work, and the memory the machine has available is at least
    :data:`MEMORY_FACTOR` times this process's peak so far (the evaluation and the check
    then hold their states at once)."""
    if os.environ.get("EXACTMEM_OVERLAP", "").strip() == "0":
        return False
    jobs = os.environ.get("EXACTMEM_JOBS", "").strip()
    if not (hasattr(os, "fork") and sys.platform != "win32" and (os.cpu_count() or 1) > 1
            and jobs != "1" and positions >= MIN_POSITIONS):
        return False
    free = _available_bytes()
    return free is None or free >= MEMORY_FACTOR * _peak_bytes()


def _available_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo (Linux), else ``None`` (not known)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _peak_bytes() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, else kB


def labels_as_predictions(ds: Dataset, scalar: bool) -> Evaluation:
    """The evaluation of a network that memorizes ``ds``: every read position predicts its
    label (``Fraction(y)`` for a scalar readout, class ``y`` otherwise), no failures."""
    value: dict[int, Fraction | int] = {}  # one object per label value: N rows share them
    preds: list[tuple[Fraction | int | None, ...]] = []
    for i in range(ds.N):
        labels = ds.position_labels(i)
        preds.append(tuple(value.setdefault(y, Fraction(y) if scalar else y) for y in labels))
    return Evaluation(tuple(preds), ())


class Forked:
    """``fn(*args)`` running in a forked child; :meth:`result` waits for it."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        read, write = os.pipe()
        gc.collect()
        gc.freeze()  # the child's collector leaves the parent's objects (and pages) alone
        try:
            pid = os.fork()
        finally:
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
                                        name="forked evaluation: result")
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
            raise ExactmemError(f"the forked evaluation ended without a result (status "
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
