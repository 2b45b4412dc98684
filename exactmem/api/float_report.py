"""The full float fidelity report of ``exactmem precision CERT``: the dtype table (torch
and onnxruntime), the fewest significand bits for rounded weights and for the MPFR forward
pass, an optional plot, and the ``bits``-bit forward pass certified
(:mod:`exactmem.floats.fidelity`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class FidelityReport:
    """``lines``: the report for stdout; ``data``: the same as JSON-ready values;
    ``certified``: False when the ``bits``-bit pass fails some sequence."""

    lines: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)
    certified: bool = True


def _vars_of(row: object) -> dict[str, object]:
    return {k: getattr(row, k) for k in row.__slots__}  # type: ignore[attr-defined]


def fidelity_report(certificate: str | Path, *, device: str = "cpu", bits: int | None = None,
                    search: bool = True, scan: bool = False, plot: str | Path | None = None,
                    json_out: str | Path | None = None,
                    log: Callable[[str], None] | None = None,
                    ulps: int | None = None) -> FidelityReport:
    """The report of ``exactmem precision`` for the certificate file ``certificate``;
    ``bits`` None takes the certificate's ``max_bits`` when it has one; ``plot`` writes
    the memorized fraction against the significand bits; ``json_out`` the data as JSON.
    A language-model certificate gets the table of :mod:`~exactmem.api.execution_table`
    (``ulps``: its execution model's accuracy of exp/tanh/erf/rsqrt)."""
    import json

    from exactmem.files.atomic import check_writable, write_text_atomic
    from exactmem.optional import need

    say = log or (lambda _msg: None)
    need("torch", "precision")  # the dtype table runs the network in torch
    if plot:
        need("matplotlib", "precision --plot")
        check_writable(plot)
    if json_out:
        check_writable(json_out)
    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )
    from exactmem.floats import fidelity as pr
    from exactmem.lm.certfile import LM_FORMAT

    cert = read_certificate(certificate, (LM_FORMAT,))
    if cert.get("format") == LM_FORMAT:
        from exactmem.api.execution_table import lm_precision
        from exactmem.errors import SpecError

        if bits is not None or scan:
            raise SpecError("--bits and --scan: network certificates only (a language model's "
                            "table is per format, from its execution model)")
        table, data = lm_precision(certificate, cert, ulps, plot, log)
        if json_out:
            write_text_atomic(json_out, json.dumps(data, indent=1, sort_keys=True) + "\n")
        return FidelityReport(tuple(table), data, True)
    if ulps is not None:
        from exactmem.errors import SpecError

        raise SpecError("--ulps: language-model certificates only")
    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert, Path(certificate).parent)
    if device.startswith("cuda"):
        from exactmem.exporters.torch import cuda_available

        if not cuda_available():
            say("exactmem precision: no CUDA device; running the dtype table on the CPU")
            device = "cpu"
    out: dict[str, Any] = {"certificate": str(certificate), "N": ds.N, "n": ds.n}
    lines: list[str] = []
    certified = True
    if not search:
        rows, _ = pr.float_rows(spec, ds, ("float64", "float32", "bfloat16", "float16"),
                                device)
        others, notes = pr.runtime_rows(spec, ds)
        lines.append("\n".join(pr.rows_table(rows + others) + notes))
        out["rows"] = [_vars_of(r) for r in rows + others]
    else:
        report = pr.precision_report(spec, ds, device, scan=scan, log=log)
        lines.append(report.table())
        out.update(rows=[_vars_of(r) for r in report.rows + report.runtime_rows],
                   weights_p=report.weights.p, forward_p=report.forward.p,
                   weights=report.weights.line(), forward=report.forward.line(),
                   p53_output_disagreements=list(report.p53_disagreements or ()),
                   p53_verdict_disagreements=list(report.p53_verdict_disagreements or ()))
        if plot:
            curve = pr.curves(spec, ds, report, log=log)
            name = cert.get("construction", {}).get("name", "network")
            pr.plot(curve, str(plot), f"{name}, N = {ds.N}, n = {ds.n}")
            lines.append(f"plot: {plot}")
            out["curves"] = {k: {str(p): v for p, v in c.items()} for k, c in curve.items()}
    if bits is None:
        params = cert.get("construction", {}).get("params", {})
        mb = params.get("max_bits") if isinstance(params, dict) else None
        bits = int(mb) if isinstance(mb, int) and mb > 0 else None
    if bits is not None:
        clock = time.perf_counter()
        fmt, misses = pr.certify_at(spec, ds, bits)
        took = time.perf_counter() - clock
        if misses:
            certified = False
            lines.append(f"NOT certified at {bits} bits ({fmt.name}): {len(misses)} read "
                         f"positions fail, first: {misses[0]}")
            for m in misses[1:10]:
                say(f"  {m}")
        else:
            lines.append(f"certified at {bits} bits ({fmt.name}, MPFR, every operation "
                         f"correctly rounded): all {ds.N} sequences memorized ({took:.1f}s)")
        out["bits"] = {"p": bits, "format": fmt.name, "misses": [str(m) for m in misses]}
    if json_out:
        write_text_atomic(json_out, json.dumps(out, indent=1, sort_keys=True) + "\n")
    return FidelityReport(tuple(lines), out, certified)
