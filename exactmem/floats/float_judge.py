"""The float rule, shared by the precision report and the runtime rows: which read
positions a network's float outputs get right (:func:`judge`), and one row of the dtype
table (:class:`DtypeRow`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec

Values = Sequence[Sequence[Sequence[Fraction | None]]]  # [sequence][position][coordinate]


@dataclass(frozen=True, slots=True)
class Miss:
    """A read position whose float output does not give the label."""

    sequence: int
    position: int
    expected: int
    found: str

    def __str__(self) -> str:
        return (f"sequence {self.sequence}, position {self.position}: expected {self.expected}, "
                f"found {self.found}")


def judge(spec: NetworkSpec, ds: Dataset, values: Values) -> list[Miss]:
    """Every read position where the outputs ``values`` do not give the label (float rule)."""
    misses: list[Miss] = []
    positions = spec.read_positions()
    scalar = spec.readout.kind == "scalar"
    for i in range(ds.N):
        for k, y, vec in zip(positions, ds.position_labels(i), values[i], strict=True):
            if any(v is None for v in vec):
                misses.append(Miss(i, k, y, "a non-finite output"))
                continue
            if scalar:
                o = vec[0]
                assert o is not None
                if not abs(o - y) < Fraction(1, 2):
                    misses.append(Miss(i, k, y, f"{float(o)!r}"))
            else:
                best = max(v for v in vec if v is not None)
                winners = [c for c, v in enumerate(vec) if v == best]
                if winners != [y]:
                    misses.append(Miss(i, k, y, f"argmax {winners}"))
    return misses


def memorized_fraction(ds: Dataset, misses: Sequence[Miss]) -> float:
    return 1 - len({m.sequence for m in misses}) / ds.N


# (a) weights rounded to p bits, evaluated exactly -----------------------------------------


@dataclass(frozen=True, slots=True)
class DtypeRow:
    """One float format run directly in a runtime (torch, or onnxruntime on the exported
    graph): memorized fraction and first failing sequences."""

    dtype: str
    precision: int
    memorized: float
    failing: tuple[int, ...]
    seconds: float
    runtime: str = "torch"
