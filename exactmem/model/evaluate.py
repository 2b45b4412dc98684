"""Exact evaluation of a network on a dataset and the memorization verdict per position."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from exactmem.model.dataset import Dataset
from exactmem.model.forward import Progress, ticker
from exactmem.model.sliced import forward_sliced
from exactmem.model.spec import NetworkSpec


@dataclass(frozen=True, slots=True)
class Failure:
    """A read position whose exact output does not give the label."""

    sequence: int
    position: int
    expected: int
    found: str

    def __str__(self) -> str:
        return (f"sequence {self.sequence}, position {self.position}: expected label "
                f"{self.expected}, the network gives {self.found}")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Predictions (scalar output or argmax class; ``None`` for a tie) and failures."""

    predictions: tuple[tuple[Fraction | int | None, ...], ...]
    failures: tuple[Failure, ...]

    @property
    def memorized(self) -> bool:
        return not self.failures


READOUT_BLOCK = 1000  # sequences per progress report of the readout
SLICE = 8192  # sequences the layers up to the last attention layer hold at once


def evaluate(spec: NetworkSpec, ds: Dataset, progress: Progress | None = None) -> Evaluation:
    """Run ``spec`` exactly on every sequence of ``ds`` and compare with the labels.  The
    layers up to the last attention layer run on at most :data:`SLICE` sequences at a time,
    the token-wise layers after it once on the joined state (:mod:`exactmem.model.sliced`),
    so a deep block is walked once, not once per slice.  ``progress(stage, done, total)``
    is called per layer unit (``"forward"``) and per block of sequences (``"readout"``)."""
    return _evaluate(spec, ds, progress)


def join(parts: list[tuple[int, Evaluation]]) -> Evaluation:
    """One evaluation from ``(offset, evaluation of the slice at offset)`` in order: the
    predictions concatenated, failures renumbered to the whole dataset's sequences."""
    preds: list[tuple[Fraction | int | None, ...]] = []
    fails: list[Failure] = []
    for lo, ev in parts:
        preds += ev.predictions
        fails += [dataclasses.replace(f, sequence=f.sequence + lo) for f in ev.failures]
    return Evaluation(tuple(preds), tuple(fails))


def _evaluate(spec: NetworkSpec, ds: Dataset, progress: Progress | None) -> Evaluation:
    state = forward_sliced(spec, ds, progress, SLICE)
    tick = ticker(progress, "readout", -(-ds.N // READOUT_BLOCK))
    positions = spec.read_positions()
    scalar = spec.readout.kind == "scalar"
    preds: list[tuple[Fraction | int | None, ...]] = []
    fails: list[Failure] = []
    den = state.den
    for i in range(ds.N):
        labels = ds.position_labels(i)
        row: list[Fraction | int | None] = []
        for k, y in zip(positions, labels, strict=True):
            col = state.cols[:, state.index[i, k]]
            if scalar:
                v = int(col[0])
                pred: Fraction | int | None = Fraction(v, den)
                ok = v == y * den
                found = str(pred)
            else:
                vals = [int(v) for v in col]
                best = max(vals)
                winners = [c for c, v in enumerate(vals) if v == best]
                pred = winners[0] if len(winners) == 1 else None
                ok = pred == y
                found = f"class {pred}" if pred is not None else f"a tie between classes {winners}"
            row.append(pred)
            if not ok:
                fails.append(Failure(i, k, y, found))
        preds.append(tuple(row))
        if (i + 1) % READOUT_BLOCK == 0 or i + 1 == ds.N:
            tick()
    return Evaluation(tuple(preds), tuple(fails))
