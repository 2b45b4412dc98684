"""Typed results of the public API: immutable, and their ``str`` is a short report.

Each result keeps the bulky data (a certificate, a full failure list) but prints only the
verdict and the figures a user looks at first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exactmem.model.sizes import Sizes


def _failures_text(failures: tuple[str, ...], first: int = 1) -> str:
    if not failures:
        return ""
    shown = "; ".join(failures[:first])
    return f", {len(failures)} failures (first: {shown})"


def _sizes_text(s: Sizes) -> str:
    return (f"params nonzero {s.params_nonzero}, dense {s.params_dense}, depth {s.depth}, "
            f"width {s.width}, max bits {s.max_bits}")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The trusted checker's verdict on a certificate (``exactmem check``).

    ``exit_code`` is the CLI's: 0 verified, 1 rejected, 2 unusable input.
    """

    verified: bool
    unusable: bool
    exit_code: int
    failures: tuple[str, ...]
    claim: str | None = None
    path: Path | None = None
    notes: tuple[str, ...] = ()  # what the checker says besides the failures (counts)

    @property
    def line(self) -> str:
        """The checker's stdout line: ``s VERIFIED``, ``s REJECTED`` or ``s UNUSABLE``."""
        return f"s {self.verdict.upper()}"

    @property
    def verdict(self) -> str:
        """``"verified"``, ``"rejected"`` or ``"unusable"``."""
        return {0: "verified", 1: "rejected"}.get(self.exit_code, "unusable")

    def __bool__(self) -> bool:
        return self.verified

    def __repr__(self) -> str:
        where = f" {self.path}" if self.path is not None else ""
        return f"CheckResult({self.verdict}{where}{_failures_text(self.failures)})"

    def __str__(self) -> str:
        lines = [f"{self.verdict}" + (f": {self.claim}" if self.claim else "")]
        lines += [f"  {f}" for f in self.failures[:20]]
        if len(self.failures) > 20:
            lines.append(f"  ... and {len(self.failures) - 20} more failures")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CertifyResult:
    """A certificate built, evaluated exactly and checked (``exactmem certify`` and
    ``exactmem certify-model``); ``path`` is set only when the certificate was written."""

    verified: bool
    construction: str
    N: int  # noqa: N815 - the papers' name
    sizes: Sizes
    check: CheckResult
    path: Path | None = None
    failing_sequences: tuple[int, ...] = ()
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    certificate: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.verified

    def __repr__(self) -> str:
        verdict = "verified" if self.verified else "not certified"
        where = f" -> {self.path}" if self.path is not None else ""
        return (f"CertifyResult({verdict}, {self.construction}, N = {self.N}{where}, "
                f"{_sizes_text(self.sizes)}{_failures_text(self.failures)})")

    def __str__(self) -> str:
        if self.verified:
            where = f" -> {self.path}" if self.path is not None else ""
            return (f"certified {self.construction} on {self.N} sequences{where} "
                    f"({_sizes_text(self.sizes)})")
        seqs = ", ".join(map(str, self.failing_sequences[:20]))
        more = len(self.failing_sequences) - 20
        lines = [f"not certified ({self.construction}, N = {self.N}): "
                 f"{len(self.failing_sequences)} sequences not memorized"
                 + (f": {seqs}" + (f" and {more} more" if more > 0 else "") if seqs else "")]
        lines += [f"  {f}" for f in self.failures[:20]]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class InfoResult:
    """Size figures of a certificate's network and, where stated, the theorem's bound."""

    construction: str
    N: int  # noqa: N815
    n: int
    task: str
    inputs: str
    d: int | None
    C: int  # noqa: N815
    sizes: Sizes
    params: dict[str, Any] = field(default_factory=dict)
    bound: dict[str, Any] | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    """Lower bounds, optimality gaps and bit figures (:mod:`exactmem.constructions.bounds`)."""

    def as_dict(self) -> dict[str, Any]:
        """The object ``exactmem info --json`` prints."""
        out: dict[str, Any] = {"construction": self.construction, "N": self.N, "n": self.n,
                               "task": self.task, "inputs": self.inputs, "d": self.d,
                               "C": self.C, "params": dict(self.params), **self.sizes.as_dict()}
        if self.bound is not None:
            out["bound"] = dict(self.bound)
        out.update(self.figures)
        return out

    def __repr__(self) -> str:
        return (f"InfoResult({self.construction}, N = {self.N}, n = {self.n}, "
                f"{_sizes_text(self.sizes)}" + (f", bound {self.bound}" if self.bound else "")
                + ")")

    def __str__(self) -> str:
        data = self.as_dict()
        lines = [f"{k:15s} {data[k]}" for k in (
            "construction", "N", "n", "task", "inputs", "d", "C", "params_dense",
            "params_nonzero", "depth", "width", "max_bits")]
        lines += [f"bound.{k:9s} {v}" for k, v in (self.bound or {}).items()]
        if "label_bits_per_dense" in data:  # one definition each: constructions/bounds.py
            lines += [f"{k:15s} {data[k]}" for k in (
                "weight_bits_total", "label_bits", "label_bits_per_nonzero",
                "label_bits_per_dense")]
            lines.append(f"{'label_bits_per_stored_bit':15s} {data['label_bits_per_stored_bit']}"
                         f" ({data['stored_dtype']})")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LMInfoResult:
    """What a language model's certificate claims (``exactmem info`` on an
    ``exactmem.lm-certificate/1``): positions certified, the model's shape, and with code
    lengths the memorized bits the checker states (:func:`exactmem.lm.certfile.lm_info`)."""

    figures: dict[str, Any]
    keys: tuple[str, ...] = ()  # the figures the text form shows first

    @property
    def certified_positions(self) -> int:
        return int(self.figures["certified_positions"])

    @property
    def positions(self) -> int:
        return int(self.figures["positions"])

    def as_dict(self) -> dict[str, Any]:
        """The object ``exactmem info --json`` prints."""
        return dict(self.figures)

    def __repr__(self) -> str:
        return (f"LMInfoResult({self.certified_positions} of {self.positions} positions, "
                f"N = {self.figures['N']}, n = {self.figures['n']})")

    def __str__(self) -> str:
        bits = sorted(k for k in self.figures if "bits" in k and k not in self.keys)
        return "\n".join(f"{key:20s} {self.figures[key]}" for key in (*self.keys, *bits)
                         if key in self.figures)


@dataclass(frozen=True, slots=True)
class ExportResult:
    """A certified network written in a float format (``exactmem export``)."""

    path: Path
    format: str
    dtype: str
    weights: int
    rounded: int
    overflowed: int
    sidecar: Path | None = None
    line: str = ""  # the summary ``exactmem export`` prints, with the run in the runtime
    complete: bool = True  # False: the file does not memorize (written with allow_lossy)
    verification: str = ""  # how the certificate was checked first (api.verified)

    def __str__(self) -> str:
        if self.line:
            return self.line
        side = f"; exact sidecar {self.sidecar}" if self.sidecar is not None else ""
        return (f"wrote {self.path} ({self.format}, {self.dtype}): {self.weights} weights, "
                f"{self.rounded} rounded, {self.overflowed} overflowed to infinity{side}")


@dataclass(frozen=True, slots=True)
class DtypeFidelity:
    """One float dtype run in torch: memorized fraction and the first failing sequences."""

    dtype: str
    precision: int
    memorized: float
    failing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PrecisionResult:
    """Where float precision breaks memorization (``exactmem precision``).

    ``weights_p`` / ``forward_p``: the fewest significand bits for which (a) the rounded
    weights evaluated exactly and (b) the MPFR forward pass memorize (``None``: not searched
    or never); ``bits``: the ``P`` certified with ``bits=P`` and its misses."""

    N: int  # noqa: N815
    rows: tuple[DtypeFidelity, ...]
    weights_p: int | None = None
    forward_p: int | None = None
    lines: tuple[str, ...] = ()
    bits: int | None = None
    bits_misses: tuple[str, ...] = ()

    @property
    def bits_certified(self) -> bool | None:
        """Whether the ``bits``-bit forward pass memorizes every sequence (``None``: not asked)."""
        return None if self.bits is None else not self.bits_misses

    def __repr__(self) -> str:
        rows = ", ".join(f"{r.dtype} {r.memorized:.4f}" for r in self.rows)
        extra = "" if self.bits is None else \
            f", {self.bits} bits {'certified' if self.bits_certified else 'NOT certified'}"
        return (f"PrecisionResult(N = {self.N}, memorized: {rows}; weights p = "
                f"{self.weights_p}, forward p = {self.forward_p}{extra})")

    def __str__(self) -> str:
        out = [f"{'dtype':<9} {'p':>3} {'memorized':>10}  first failing sequences"]
        out += [f"{r.dtype:<9} {r.precision:>3} {r.memorized:>10.4f}  "
                f"{', '.join(map(str, r.failing)) or '-'}" for r in self.rows]
        out += list(self.lines)
        if self.bits is not None:
            out.append(f"{self.bits} bits: " + ("all sequences memorized" if self.bits_certified
                                                else f"{len(self.bits_misses)} misses, first: "
                                                     f"{self.bits_misses[0]}"))
        return "\n".join(out)


def _shape_label(sh: dict[str, Any]) -> str:
    return (f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} "
            f"q{sh['ff_width']}")


def search_reason(report: dict[str, Any], minimize: str | None,
                  outside: list[str]) -> str:
    """Why a found size is only "at most": no sweep, margin ties, smaller shapes not
    decided, or ``outside`` (shapes beyond the sweep's caps with no more parameters)."""
    if minimize is None:
        return "only the given shape was tried (no --minimize)"
    parts = []
    if report.get("ties") == "margin":
        parts.append("--ties margin restricts hardmax ties, so a smaller shape it refutes "
                     "may still memorize with exact ties")
    open_ = [e for e in report.get("sizes", ()) if e.get("status") == "unknown"]
    if open_:
        named = ", ".join(_shape_label(e["shape"]) + (f" ({e['reason']})" if e.get("reason")
                                                      else "") for e in open_[:3])
        parts.append(f"{len(open_)} smaller shape{'s' if len(open_) > 1 else ''} not "
                     f"decided: {named}" + (" ..." if len(open_) > 3 else ""))
    if outside:
        parts.append("not tried: " + "; ".join(outside))
    return "; ".join(parts) or "not every smaller shape was refuted"


def search_summary(report: dict[str, Any]) -> list[str]:
    """The summary lines of a search report: the answer with its qualifier (what the
    weights are and whose word an infeasible answer is), then why a size is "at most"."""
    q = report.get("qualifier", "")
    m = report.get("minimal")
    status = report["status"]
    if "sequences" in report:  # every labelling of the inputs
        head = f"status: {status}" + (f"; shatters with {report['claim']} {m['params']} "
                                      f"parameters" if m else "; no shape shatters") + f", {q}"
    elif m is None:
        head = f"status: {status}; no memorizing shape found, {q}"
    else:
        head = (f"status: found; {report['claim']}: {m['params']} parameters, {q} "
                f"(layers {m['layers']}, heads {m['heads']}, d_model {m['d_model']}, "
                f"head_dim {m['head_dim']}, ff_width {m['ff_width']})")
    why = report.get("claim_reason")
    return [head] + ([f"why at most: {why}"] if why else [])


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The outcome of a search for a small hardmax network (``exactmem search``).

    ``status``: ``found``, ``infeasible`` or ``unknown``; ``minimal``: the smallest shape
    found (with its parameter count); ``proved_minimal``: smaller shapes were refuted;
    ``qualifier``: what was searched and whose word a refutation is ("among 2-bit integer
    weights, LRAT-checked" / "real weights, solvers' word"); ``reason``: why the claim is
    "at most"; ``report``: the ``--json`` object."""

    status: str
    minimal: dict[str, Any] | None
    proved_minimal: bool
    claim: str | None
    shapes: tuple[dict[str, Any], ...] = ()
    report: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    qualifier: str = ""
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.status == "found"

    def __repr__(self) -> str:
        m = self.minimal
        best = "" if m is None else f", {self.claim or 'at most'} {m.get('params')} parameters"
        what = f", {self.qualifier}" if self.qualifier else ""
        return f"SearchResult({self.status}{best}{what}, {len(self.shapes)} shapes tried)"

    def __str__(self) -> str:
        return "\n".join(search_summary({**self.report, "status": self.status,
                                         "minimal": self.minimal, "claim": self.claim}))


@dataclass(frozen=True, slots=True)
class LemmaResult:
    """One lemma of ``proofs/``: ``status`` is ``proved``, ``failed`` or ``unknown``."""

    name: str
    status: str
    seconds: float
    detail: str = ""
    quick: bool = False
    text: str = ""  # the line ``exactmem prove`` prints for it


@dataclass(frozen=True, slots=True)
class ProveResult:
    """The lemma proofs re-run (``exactmem prove``); true when every selected one is proved."""

    lemmas: tuple[LemmaResult, ...]
    quick: bool = False

    @property
    def proved(self) -> int:
        return sum(lemma.status == "proved" for lemma in self.lemmas)

    def __bool__(self) -> bool:
        return self.proved == len(self.lemmas)

    def __repr__(self) -> str:
        return (f"ProveResult({self.proved} of {len(self.lemmas)} lemmas proved"
                + (", quick)" if self.quick else ")"))

    def __str__(self) -> str:
        lines = [f"{x.status:8s} {x.seconds:8.2f}s  {x.name}"
                 + (f"  ({'quick: ' if x.quick else ''}{x.detail})" if x.detail or x.quick
                    else "") for x in self.lemmas]
        return "\n".join(lines + [f"{self.proved} of {len(self.lemmas)} lemmas proved"
                                   + (" (quick)" if self.quick else "")])
