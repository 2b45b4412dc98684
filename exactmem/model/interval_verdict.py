"""The verdict of the rigorous softmax evaluation (:mod:`exactmem.model.interval`).

Each read position is *certified* when the label is forced by the interval bounds (argmax:
the label's lower bound beats every other class's upper bound; scalar: ``|out - label| <=
epsilon`` on the whole interval), *refuted* when the bounds exclude it, *undecided*
otherwise.  :func:`certify_interval` escalates the precision (bits of the exp/softmax bounds)
until every read position is decided or a limit is hit; the verdict is then
``"undecided"``, never ``"verified"``.  Networks without softmax scores are evaluated by the
exact forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from exactmem.arith import format_rational, to_rational
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import READOUT_BLOCK, Evaluation, Failure, evaluate
from exactmem.model.forward import Progress, ticker
from exactmem.model.interval import (
    DEFAULT_PRECISIONS,
    IState,
    Undecided,
    has_softmax_scores,
    interval_forward,
)
from exactmem.model.spec import NetworkSpec

Status = Literal["verified", "refuted", "undecided"]


@dataclass(frozen=True, slots=True)
class IntervalOutcome:
    """The verdict of a rigorous evaluation.

    ``status``: ``verified`` (every read position certified), ``refuted`` (some position is
    proved wrong) or ``undecided`` (precision limit hit).  ``evaluation`` holds the certified
    predictions (``None`` where not certified) and one failure per position not certified.
    ``precision`` is the last precision used, ``order`` the largest Taylor order.
    """

    status: Status
    evaluation: Evaluation
    precision: int
    order: int
    epsilon: Fraction | None
    undecided: tuple[Failure, ...] = ()

    @property
    def verified(self) -> bool:
        return self.status == "verified"


def _decide(spec: NetworkSpec, ds: Dataset, st: IState, epsilon: Fraction | None,
            progress: Progress | None = None,
            ) -> tuple[list[tuple[Fraction | int | None, ...]], list[Failure], list[Failure]]:
    """Per read position: certified prediction, or a refuted / undecided failure;
    ``progress("decide", done, total)`` per block of sequences."""
    tick = ticker(progress, "decide", -(-ds.N // READOUT_BLOCK))
    preds: list[tuple[Fraction | int | None, ...]] = []
    refuted: list[Failure] = []
    undecided: list[Failure] = []
    den = st.den
    for i in range(ds.N):
        row: list[Fraction | int | None] = []
        for k, y in zip(spec.read_positions(), ds.position_labels(i), strict=True):
            c = st.index[i, k]
            mid = [int(v) for v in st.mid[:, c]]
            rad = [int(v) for v in st.rad[:, c]]
            lo = [m - r for m, r in zip(mid, rad, strict=True)]
            hi = [m + r for m, r in zip(mid, rad, strict=True)]
            pred: Fraction | int | None = None
            if spec.readout.kind == "argmax":
                others = [hi[j] for j in range(len(hi)) if j != y]
                if y >= len(mid) or any(lo[j] > hi[y] for j in range(len(mid)) if j != y):
                    refuted.append(Failure(i, k, y, "another class provably scores higher"))
                elif all(lo[y] > v for v in others):
                    pred = y
                else:
                    best = max(range(len(mid)), key=lambda j: mid[j])
                    undecided.append(Failure(i, k, y, f"undecided (class {best} overlaps "
                                                      f"the label's bounds)"))
            else:
                tol = (epsilon or Fraction(0)) * den
                dev = abs(Fraction(mid[0]) - y * den)
                if dev + rad[0] <= tol:
                    pred = Fraction(y)
                elif dev - rad[0] > tol:
                    refuted.append(Failure(i, k, y, f"output in [{Fraction(lo[0], den)}, "
                                                    f"{Fraction(hi[0], den)}], outside the "
                                                    f"tolerance {epsilon or 0}"))
                else:
                    undecided.append(Failure(i, k, y, "undecided: the output interval "
                                                      "straddles the tolerance"))
            row.append(pred)
        preds.append(tuple(row))
        if (i + 1) % READOUT_BLOCK == 0 or i + 1 == ds.N:
            tick()
    return preds, refuted, undecided


def certify_interval(spec: NetworkSpec, ds: Dataset, epsilon: object | None = None,
                     precisions: Sequence[int] = DEFAULT_PRECISIONS,
                     progress: Progress | None = None) -> IntervalOutcome:
    """Decide memorization rigorously, escalating the precision (bits) of the softmax
    bounds through ``precisions`` until every read position is decided.
    ``progress(stage, done, total)`` is called as each pass advances."""
    eps = None if epsilon is None else to_rational(epsilon, "epsilon")
    if eps is not None and eps < 0:
        raise SpecError(f"epsilon must be >= 0, found {eps}")
    if not has_softmax_scores(spec):
        ev = evaluate(spec, ds, progress)
        if eps is None or spec.readout.kind != "scalar":
            return IntervalOutcome("verified" if ev.memorized else "refuted", ev, 0, 0, eps)
    if not precisions:
        raise SpecError("certify_interval needs at least one precision")
    last: IntervalOutcome | None = None
    for p in precisions:
        try:
            st, stats = interval_forward(spec, ds, p, progress)
        except Undecided as exc:
            fail = Failure(-1, -1, -1, f"undecided inside the network: {exc}")
            none = tuple((None,) * len(spec.read_positions()) for _ in range(ds.N))
            last = IntervalOutcome("undecided", Evaluation(none, (fail,)), p, 0, eps, (fail,))
            continue
        preds, refuted, undecided = _decide(spec, ds, st, eps, progress)
        ev = Evaluation(tuple(preds), tuple(refuted + undecided))
        if refuted:
            return IntervalOutcome("refuted", ev, p, stats["order"], eps, tuple(undecided))
        if not undecided:
            return IntervalOutcome("verified", ev, p, stats["order"], eps)
        last = IntervalOutcome("undecided", ev, p, stats["order"], eps, tuple(undecided))
    assert last is not None
    return last


def softmax_hint(outcome: IntervalOutcome) -> dict[str, Any]:
    """The JSON-ready ``hints["softmax"]`` entry for a certificate (see docs/softmax.md)."""
    hint: dict[str, Any] = {"precision": outcome.precision, "taylor_order": outcome.order}
    if outcome.epsilon is not None:
        hint["epsilon"] = format_rational(outcome.epsilon)
    return hint


def evaluate_certified(spec: NetworkSpec, ds: Dataset,
                       hints: Mapping[str, Any] | None = None,
                       progress: Progress | None = None) -> Evaluation:
    """Exact evaluation, or the rigorous interval evaluation for softmax networks, using
    ``hints["softmax"]`` (``precision``, ``epsilon``) when present.  Positions not certified
    are failures; a certified scalar position predicts its label (within ``epsilon``).
    ``progress(stage, done, total)`` is called as the evaluation advances."""
    if not has_softmax_scores(spec):
        return evaluate(spec, ds, progress)
    hint = (hints or {}).get("softmax", {})
    if "readout" in hint:  # the exact-readout claim: only the checker's proof decides it
        return Evaluation(tuple(tuple(Fraction(y) for y in ds.position_labels(i))
                                for i in range(ds.N)), ())
    eps = hint.get("epsilon")
    start = int(hint.get("precision", DEFAULT_PRECISIONS[0]))
    ladder = [start] + [p for p in DEFAULT_PRECISIONS if p > start]
    return certify_interval(spec, ds, eps, ladder, progress).evaluation
