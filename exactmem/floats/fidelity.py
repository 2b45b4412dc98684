"""Where float precision breaks memorization: the fidelity report.

For a certified network and its dataset this answers, per float format, whether the
network still memorizes when run in that format, and gives two exact answers:

(a) ``weights``: the smallest significand width ``p`` (MPFR convention: float32 = 24) such
    that the weights rounded once to ``p`` bits, *evaluated exactly*, still memorize;
(b) ``forward``: the smallest ``p`` such that the whole forward pass run in ``p``-bit
    floating point (every operation correctly rounded, :mod:`exactmem.floats.mpfr_eval`)
    still memorizes.

Float readout rule (the float counterpart of the exact readout): a scalar output ``o``
gives label ``y`` iff ``o`` is finite and ``|o - y| < 1/2``; an argmax readout needs one
unique, finite maximum at class ``y``.  Both answers come with their witnesses: memorization
holds at ``p`` on every sequence, and fails at ``p - 1`` on a named sequence.  The search
bisects between ``p = 1`` and an upper bound where memorization holds (for dyadic weights
the bound of (a) is the widest significand, where rounding changes nothing); ``scan=True``
instead walks down from the bound, so that memorization holds at *every* ``p`` in
``[p, bound]``.

The dtype table runs the network directly: in torch in every dtype, and (``runtime_rows``)
the graph ``export --format onnx`` writes, in onnxruntime, in float64 and float32 (the two
runtimes round and sum differently: the rows can differ).

Every phase reports its progress on stderr (:mod:`exactmem.progress`): the torch runs per
dtype, and each probe of the searches per layer (``(b) p = 27 forward: 1200/6000 ...``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from exactmem import progress as progress_ui
from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.floats.float_judge import DtypeRow, Miss, Values, judge, memorized_fraction
from exactmem.floats.formats import FORMATS, FloatFormat, bits, round_to_format, significand_bits
from exactmem.floats.mpfr_eval import exact_values, forward_float
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import evaluate
from exactmem.model.forward import Progress
from exactmem.model.interval import has_softmax_scores
from exactmem.model.interval_verdict import certify_interval
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    Linear,
    NetworkSpec,
)

MAX_P = 4096
IEEE_BY_PRECISION = {f.precision: f for f in FORMATS.values()}


def _round_int(x: int, p: int) -> int:
    """The integer ``x`` rounded to ``p`` significant bits, to nearest, ties to even."""
    shift = abs(x).bit_length() - p
    if shift <= 0:
        return x
    q, r = divmod(abs(x), 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << shift) if x > 0 else -(q << shift)


def _round(m: ScaledMatrix, fmt: FloatFormat) -> ScaledMatrix:
    if m.den == 1 and fmt.emax is None:  # integers, unbounded exponent: integer rounding
        if all(abs(x).bit_length() <= fmt.precision for row in m.num for x in row):
            return m
        return ScaledMatrix(tuple(tuple(_round_int(x, fmt.precision) for x in row)
                                  for row in m.num), 1, m.cols)
    rows = []
    for row in m.num:
        r = []
        for x in row:
            v = round_to_format(Fraction(x, m.den), fmt)
            if v is None:
                raise SpecError(f"a weight overflows {fmt.name}")
            r.append(v)
        rows.append(r)
    return ScaledMatrix.from_rows(rows, cols=m.cols)


def _round_affine(a: Affine, fmt: FloatFormat) -> Affine:
    return Affine(_round(a.weight, fmt), None if a.bias is None else _round(a.bias, fmt))


def _round_head(h: Head, fmt: FloatFormat) -> Head:
    def opt(m: ScaledMatrix | None) -> ScaledMatrix | None:
        return None if m is None else _round(m, fmt)

    return Head(_round(h.query, fmt), _round(h.key, fmt), _round(h.value, fmt),
                _round(h.output, fmt), query_bias=opt(h.query_bias), key_bias=opt(h.key_bias),
                value_bias=opt(h.value_bias), output_bias=opt(h.output_bias), scale=h.scale)


def round_spec(spec: NetworkSpec, fmt: FloatFormat) -> NetworkSpec:
    """``spec`` with every weight rounded once to nearest into ``fmt`` (exact rationals)."""
    layers: list[Layer] = []
    for layer in spec.layers:
        if isinstance(layer, Embedding):
            layers.append(Embedding(_round(layer.table, fmt), None if layer.positions is None
                                    else _round(layer.positions, fmt)))
        elif isinstance(layer, Linear):
            layers.append(Linear(_round_affine(layer.map, fmt)))
        elif isinstance(layer, FeedForward):
            layers.append(FeedForward(tuple(_round_affine(a, fmt) for a in layer.layers),
                                      residual=layer.residual))
        else:
            assert isinstance(layer, Attention)
            heads = tuple(_round_head(h, fmt) for h in layer.heads)
            layers.append(Attention(heads, kind=layer.kind, residual=layer.residual,
                                    keys=layer.keys, causal=layer.causal))
    return NetworkSpec(spec.input_kind, spec.input_dim, spec.seq_len, tuple(layers), spec.readout)


def exact_values_of(spec: NetworkSpec, ds: Dataset, progress: Progress | None = None,
                    ) -> list[list[tuple[Fraction | None, ...]]]:
    """Exact outputs of ``spec`` at the read positions (the exact forward pass)."""
    from exactmem.model.forward import forward, outputs

    return [[tuple(vec) for vec in row] for row in outputs(spec, forward(spec, ds, progress))]


def weights_misses(spec: NetworkSpec, ds: Dataset, p: int,
                   progress: Progress | None = None) -> list[Miss]:
    """Misses of the exact evaluation of ``spec`` with weights rounded to ``p`` bits (for
    softmax scores: the rigorous interval pass, an undecided position counting as a miss,
    and a scalar output certified within ``1/2`` of its label).  ``progress(stage, done,
    total)`` is called as the evaluation advances."""
    if progress is not None:
        progress("rounding", 0, 0)
    rounded = round_spec(spec, bits(p))
    if has_softmax_scores(spec):  # irrational outputs: rigorous interval bounds decide
        outcome = certify_interval(rounded, ds,
                                   Fraction(1, 2) if spec.readout.kind == "scalar" else None,
                                   progress=progress)
        return [Miss(f.sequence, f.position, f.expected, f.found)
                for f in outcome.evaluation.failures]
    if spec.readout.kind == "argmax":
        ev = evaluate(rounded, ds, progress)
        return [Miss(f.sequence, f.position, f.expected, f.found) for f in ev.failures]
    return judge(spec, ds, exact_values_of(rounded, ds, progress))


def forward_misses(spec: NetworkSpec, ds: Dataset, fmt: FloatFormat,
                   progress: Progress | None = None) -> list[Miss]:
    """Misses of the forward pass run in ``fmt`` (MPFR emulation); ``progress(stage, done,
    total)`` is called as it advances."""
    return judge(spec, ds, exact_values(forward_float(spec, ds, fmt, progress)))


def reporting(label: str, misses: Callable[[int, Progress], list[Miss]], unit: str = "it",
              ) -> Callable[[int], list[Miss]]:
    """``misses_at(p)`` for :func:`minimal_bits` that shows each probe's progress on stderr
    as ``"{label} p = {p} <stage>"`` (``unit``: what the stages count)."""
    def misses_at(p: int) -> list[Miss]:
        tick, close = progress_ui.hook(f"{label} p = {p}", heartbeat=True, unit=unit)
        try:
            return misses(p, tick)
        finally:
            close()

    return misses_at


def widest_significand(spec: NetworkSpec) -> int | None:
    """Significand bits of the widest weight; ``None`` when a weight is not dyadic."""
    from exactmem.exporters.skeleton import named_matrices

    best = 2
    for _, m, _ in named_matrices(spec):
        for row in m.num:
            for x in row:
                b = significand_bits(Fraction(x, m.den))
                if b < 0:
                    return None
                best = max(best, b)
    return best


# the search ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MinimalBits:
    """``p``: memorization holds at ``p`` and fails at ``p - 1`` (``witness``); ``None`` when
    it fails even at ``upper``.  ``probes`` maps every evaluated ``p`` to its memorized
    fraction; ``method`` is ``"bisect"`` or ``"scan"``."""

    what: str
    p: int | None
    upper: int
    witness: Miss | None
    method: str
    probes: dict[int, float] = field(default_factory=dict)

    def line(self) -> str:
        if self.method == "error":
            return f"{self.what}: not computed ({self.witness.found if self.witness else ''})"
        if self.p is None:
            return f"{self.what}: does not memorize at any p <= {self.upper}"
        claim = (f"holds at every p in [{self.p}, {self.upper}]" if self.method == "scan"
                 else f"holds at p = {self.p}")
        fail = (f"fails at p = {self.p - 1}: {self.witness}" if self.witness is not None
                else "p = 1 is not a float format")
        return f"{self.what}: p = {self.p} ({claim}; {fail})"


def minimal_bits(what: str, misses_at: Callable[[int], list[Miss]], ds: Dataset, upper: int,
                 scan: bool = False, log: Callable[[str], None] | None = None,
                 grow: bool = True) -> MinimalBits:
    """Smallest ``p`` where ``misses_at(p)`` is empty, with the witness at ``p - 1``."""
    say = log or (lambda _m: None)
    probes: dict[int, float] = {}
    found: dict[int, list[Miss]] = {}

    def probe(p: int) -> list[Miss]:
        if p not in found:
            clock = time.perf_counter()
            found[p] = misses_at(p)
            probes[p] = memorized_fraction(ds, found[p])
            say(f"{what}: p = {p}: {probes[p]:.4f} memorized ({time.perf_counter() - clock:.1f}s)")
        return found[p]

    hi = upper
    while probe(hi):
        if not grow or hi >= MAX_P:
            return MinimalBits(what, None, hi, found[hi][0], "bisect", probes)
        hi = min(2 * hi, MAX_P)
    if scan:
        p = hi
        while p > 2 and not probe(p - 1):
            p -= 1
        witness = found[p - 1][0] if p > 2 else None
        return MinimalBits(what, p, hi, witness, "scan", probes)
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    witness = found[lo][0] if lo >= 2 else None
    return MinimalBits(what, hi, upper if upper >= hi else hi, witness, "bisect", probes)


# the report ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PrecisionReport:
    rows: tuple[DtypeRow, ...]
    weights: MinimalBits
    forward: MinimalBits
    p53_disagreements: tuple[int, ...] | None
    p53_verdict_disagreements: tuple[int, ...] | None
    notes: tuple[str, ...] = ()
    runtime_rows: tuple[DtypeRow, ...] = ()  # the exported ONNX graph in onnxruntime

    def table(self) -> str:
        lines = rows_table(self.rows + self.runtime_rows)
        lines.append(self.weights.line())
        lines.append(self.forward.line())
        if self.p53_disagreements is not None:
            d = self.p53_disagreements
            lines.append(f"MPFR p=53 (IEEE float64 range) vs torch float64: outputs differ on "
                         f"{len(d)} sequences" + (f": {', '.join(map(str, d[:20]))}" if d else "")
                         + f"; verdicts differ on {len(self.p53_verdict_disagreements or ())}")
        lines.extend(self.notes)
        return "\n".join(lines)


def rows_table(rows: Sequence[DtypeRow]) -> list[str]:
    """The dtype rows as table lines, the header first: one row per runtime and dtype."""
    lines = [f"{'dtype':<9} {'runtime':<11} {'p':>3} {'memorized':>10}  first failing sequences"]
    for r in rows:
        fails = ", ".join(map(str, r.failing)) if r.failing else "-"
        lines.append(f"{r.dtype:<9} {r.runtime:<11} {r.precision:>3} {r.memorized:>10.4f}  "
                     f"{fails}")
    return lines


def runtime_rows(spec: NetworkSpec, ds: Dataset) -> tuple[list[DtypeRow], list[str]]:
    """The rows of the other runtime export targets (onnxruntime on the exported graph, in
    float64 and float32), or a note saying why there are none."""
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime")):
        return [], ["onnxruntime rows: not measured (onnx and onnxruntime are not installed)"]
    from exactmem.exporters.runtimes import onnx_rows

    return onnx_rows(spec, ds), []


TORCH_CELLS = 4_000_000  # values per activation tensor of a torch batch


def float_rows(spec: NetworkSpec, ds: Dataset, dtypes: Sequence[str], device: str = "cpu",
               first: int = 5) -> tuple[list[DtypeRow], dict[str, Values]]:
    """Run the network in torch in each dtype; the outputs are returned as exact values."""
    with progress_ui.stage("loading torch"):
        import torch

        from exactmem.exporters.torch import run_torch, to_torch
    from exactmem.model.sizes import sizes

    # batches small enough that no activation tensor exceeds TORCH_CELLS values; no autograd
    batch = max(1, min(4096, TORCH_CELLS // max(1, ds.n * sizes(spec).width)))

    rows: list[DtypeRow] = []
    outs: dict[str, Values] = {}
    with progress_ui.task("torch dtypes", total=len(dtypes), unit="dtype",
                          heartbeat=True) as bar:
        for name in dtypes:
            bar.update(0, description=f"torch {name}")
            clock = time.perf_counter()
            with torch.inference_mode():
                raw = run_torch(to_torch(spec, name, device), ds, batch, device)
            vals = [[tuple(Fraction(float(v)) if _finite(float(v)) else None for v in vec)
                     for vec in row] for row in raw.tolist()]
            misses = judge(spec, ds, vals)
            failing = tuple(sorted({m.sequence for m in misses}))[:first]
            rows.append(DtypeRow(name, FORMATS[name].precision, memorized_fraction(ds, misses),
                                 failing, time.perf_counter() - clock))
            outs[name] = vals
            bar.update()
    return rows, outs


def _finite(v: float) -> bool:
    return v == v and v not in (float("inf"), float("-inf"))


def precision_report(spec: NetworkSpec, ds: Dataset, device: str = "cpu",
                     dtypes: Sequence[str] = ("float64", "float32", "bfloat16", "float16"),
                     scan: bool = False, compare_p53: bool = True,
                     log: Callable[[str], None] | None = None,
                     runtimes: bool = True) -> PrecisionReport:
    """The full fidelity report (see the module docstring); with ``runtimes`` also a row per
    dtype of the exported ONNX graph run in onnxruntime (:func:`runtime_rows`)."""
    rows, outs = float_rows(spec, ds, dtypes, device)
    others, notes = runtime_rows(spec, ds) if runtimes else ([], [])
    wide = widest_significand(spec)
    if wide is None:
        notes.append("some weights are not dyadic: no float holds them exactly")
    upper_a = wide if wide is not None else 64
    what = "(a) weights rounded to p bits, exact evaluation"
    try:
        weights = minimal_bits(what, reporting("(a)", lambda p, tick: weights_misses(
            spec, ds, p, tick)), ds, upper_a, scan, log)
    except OverflowError as exc:  # the exact pass hit a numpy int64 limit; (b) still runs
        weights = MinimalBits(what, None, upper_a,
                              Miss(-1, -1, -1, f"the exact forward pass overflowed: {exc}"),
                              "error")
    upper_b = max(53, weights.p or 53)
    forward = minimal_bits("(b) forward pass in p-bit floating point (MPFR)",
                           reporting("(b)", lambda p, tick: forward_misses(
                               spec, ds, bits(p), tick), "op"), ds, upper_b, scan, log)
    diff: tuple[int, ...] | None = None
    vdiff: tuple[int, ...] | None = None
    if compare_p53 and "float64" in outs:
        tick, close = progress_ui.hook("MPFR float64 vs torch", heartbeat=True, unit="op")
        try:
            mp = exact_values(forward_float(spec, ds, FORMATS["float64"], tick))
        finally:
            close()
        th = outs["float64"]
        diff = tuple(i for i in range(ds.N) if [list(r) for r in mp[i]] != [list(r) for r in th[i]])
        bad_mp = {m.sequence for m in judge(spec, ds, mp)}
        bad_th = {m.sequence for m in judge(spec, ds, th)}
        vdiff = tuple(sorted(bad_mp ^ bad_th))
    return PrecisionReport(tuple(rows), weights, forward, diff, vdiff, tuple(notes),
                           tuple(others))


def certify_at(spec: NetworkSpec, ds: Dataset, p: int) -> tuple[FloatFormat, list[Miss]]:
    """Run the MPFR forward pass at ``p`` bits (with the IEEE exponent range when ``p`` is a
    standard width: 53, 24, 11, 8) and return every miss (empty = memorizes)."""
    fmt = IEEE_BY_PRECISION.get(p, bits(p))
    return fmt, reporting(f"certify at {fmt.name}:", lambda _p, tick: forward_misses(
        spec, ds, fmt, tick), "op")(p)


def curves(spec: NetworkSpec, ds: Dataset, report: PrecisionReport, window: int = 6,
           log: Callable[[str], None] | None = None) -> dict[str, dict[int, float]]:
    """Memorized fraction per ``p``: (a) at every ``p`` from 2 to its upper bound, (b) at
    every ``p`` within ``window`` of its answer plus every probe of the search."""
    say = log or (lambda _m: None)
    a: dict[int, float] = dict(report.weights.probes)
    weights_at = reporting("curve (a)", lambda p, tick: weights_misses(spec, ds, p, tick))
    forward_at = reporting("curve (b)", lambda p, tick: forward_misses(spec, ds, bits(p), tick),
                           "op")
    for p in range(2, report.weights.upper + 1):
        if p not in a and report.weights.method != "error":
            a[p] = memorized_fraction(ds, weights_at(p))
    b: dict[int, float] = dict(report.forward.probes)
    centre = report.forward.p or report.forward.upper
    for p in range(max(2, centre - window), centre + window + 1):
        if p not in b:
            b[p] = memorized_fraction(ds, forward_at(p))
            say(f"(b) p = {p}: {b[p]:.4f} memorized")
    return {"weights rounded, exact evaluation": dict(sorted(a.items())),
            "forward pass in p-bit floats (MPFR)": dict(sorted(b.items()))}


def plot(curve: dict[str, dict[int, float]], out: str, title: str) -> None:
    """PNG of memorized fraction vs significand bits (matplotlib, Agg backend)."""
    from exactmem.optional import require

    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (label, pts), marker in zip(curve.items(), ("o", "s"), strict=False):
        ax.plot(list(pts), list(pts.values()), marker=marker, markersize=3, label=label)
    for p, name in ((53, "float64"), (24, "float32"), (11, "float16"), (8, "bfloat16")):
        ax.axvline(p, color="grey", linewidth=0.5, linestyle=":")
        ax.text(p, 0.02, name, rotation=90, fontsize=7, color="grey")
    ax.set_xlabel("significand bits p (float32 = 24)")
    ax.set_ylabel("fraction of sequences memorized")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from exactmem.files.atomic import atomic_path

    with atomic_path(out) as tmp:
        fig.savefig(str(tmp), dpi=120, format="png")
    plt.close(fig)
