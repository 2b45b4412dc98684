"""The producer's exact evaluation in a forked process, beside the independent check.

A certificate claims the outputs of its network; for a network that memorizes its dataset
those are the labels (the scalar output ``y``, or class ``y``).  So :mod:`exactmem.pipeline`
can write the certificate with the labels as its claims, start the checker on it, and run
the producer's own evaluation at the same time on the other core: when the evaluation's
predictions equal the claims, the certificate the checker verified is byte for byte the
one the evaluation gives (:func:`labels_as_predictions`); when they differ, the pipeline
builds the certificate from the evaluation and checks that one, as without the overlap.
Both proofs run in full either way; only their order changes.

The evaluation runs in a child made by ``os.fork`` (:class:`exactmem.model.forked.Forked`:
the network and dataset are not copied through a pipe).  POSIX only: elsewhere, below
:data:`MIN_POSITIONS`, or with too little memory available, the pipeline evaluates first
and checks after, as before (also with ``EXACTMEM_OVERLAP=0``).
"""

from __future__ import annotations

import os
import sys
from fractions import Fraction

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
    rows: dict[tuple[int, ...], tuple[Fraction | int | None, ...]] = {}  # and one row each
    preds: list[tuple[Fraction | int | None, ...]] = []
    for i in range(ds.N):
        labels = ds.position_labels(i)
        row = rows.get(labels) if len(labels) == 1 else None
        if row is None:
            row = tuple(value.setdefault(y, Fraction(y) if scalar else y) for y in labels)
            if len(labels) == 1:
                rows[labels] = row
        preds.append(row)
    return Evaluation(tuple(preds), ())
