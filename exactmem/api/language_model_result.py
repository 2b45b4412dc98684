"""What ``certify-model`` returns for a language model (:func:`~exactmem.api.lm.certify_lm`):
positions proved, failures, per-position arrays and the claims beside them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class LMResult:
    """What certify-model did: positions proved, the failures, timings (seconds).

    Per position, as arrays ``[N, n]``: ``certified`` (bool: proved, and in the certificate
    when one is written) and ``float_margins`` (the label's float64 logit minus the best
    other's; > 0 where the float argmax is right).  ``code_lengths``: per sequence, the
    rigorous upper bound of ``-sum log2 p(label)`` in bits (next-token data, self-checked)."""

    proved: int
    positions: int
    sequences_full: int
    failed: list[tuple[int, int, float]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    written: bool = False
    checked: bool = True  # False: written without the in-process checker (--no-self-check)
    code_lengths: list[Any] = field(default_factory=list)  # rigorous upper bounds (Fraction)
    float_code_lengths: list[float] = field(default_factory=list)  # float64 estimates
    compared: str = ""  # what the float64 cross-check compared the imported function with
    readings: str = ""  # the config's reading against the others (no module given)
    mem_u: Any = None  # with a reference: (certified lower bound, float64 estimate) of mem_U
    certified: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    float_margins: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    execution: str | None = None  # the execution model's format, when claimed
    ulps: int = 0
    exec_proved: int = 0  # positions claimed for every execution of that model
    exec_code_lengths: list[Any] = field(default_factory=list)  # in every such execution
    exec_certified: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    weights: Path | None = None  # the weights file the written certificate binds

    def __bool__(self) -> bool:
        return self.written or (self.proved == self.positions and not self.failed)

    def __str__(self) -> str:
        return (f"{self.proved} of {self.positions} positions proved ({self.sequences_full} "
                f"sequences in full); cross-checked against {self.compared}")
