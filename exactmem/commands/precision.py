"""``exactmem precision CERT``: where float precision breaks memorization."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "precision", help="does the certified network still memorize in float? minimal bits",
        description="Run the certified network in float64/float32/bfloat16/float16 (torch) "
                    "and as the exported ONNX graph in float64/float32 (onnxruntime), one row "
                    "per runtime and dtype, and report the memorized fraction and first "
                    "failing sequences; then the exact "
                    "answers: (a) the fewest significand bits p (float32 = 24) for which the "
                    "weights rounded to p bits, evaluated exactly, memorize; (b) the fewest p "
                    "for which the whole forward pass in p-bit floating point (every operation "
                    "correctly rounded, gmpy2 MPFR) memorizes, each with the failing sequence "
                    "at p - 1. With --bits P (default: the certificate's max_bits) the MPFR "
                    "pass at P bits must memorize every sequence: exit 0 certified, 1 not.",
        epilog="example: exactmem precision c.json --plot bits.png",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("certificate", help="certificate file")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="write memorized fraction vs significand bits")
    p.add_argument("--device", default="cpu", help="torch device for the dtype runs (cuda)")
    p.add_argument("--bits", type=int, default=None, metavar="P",
                   help="certify the P-bit forward pass (MPFR; IEEE exponent range at 53, 24, "
                        "11, 8)")
    p.add_argument("--scan", action="store_true",
                   help="walk p down one at a time (memorization then holds at every p "
                        "between the answer and the upper bound) instead of bisecting")
    p.add_argument("--no-search", action="store_true",
                   help="skip the minimal-bits search (only the dtype table and --bits)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.adapters import need
    from exactmem.files.atomic import check_writable

    need("torch", "precision")  # the dtype table runs the network in torch
    if args.plot:
        need("matplotlib", "precision --plot")
        check_writable(args.plot)
    if args.json:
        check_writable(args.json)
    from exactmem.adapters import precision as pr
    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cert = read_certificate(args.certificate)
    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert, Path(args.certificate).parent)
    if args.device.startswith("cuda"):
        from exactmem.adapters.torch import cuda_available

        if not cuda_available():
            log("exactmem precision: no CUDA device; running the dtype table on the CPU")
            args.device = "cpu"
    out: dict[str, object] = {"certificate": args.certificate, "N": ds.N, "n": ds.n}
    status = 0
    if args.no_search:
        rows, _ = pr.float_rows(spec, ds, ("float64", "float32", "bfloat16", "float16"),
                                args.device)
        others, notes = pr.runtime_rows(spec, ds)
        print("\n".join(pr.rows_table(rows + others) + notes))
        out["rows"] = [vars_of(r) for r in rows + others]
    else:
        report = pr.precision_report(spec, ds, args.device, scan=args.scan, log=log)
        print(report.table())
        out.update(rows=[vars_of(r) for r in report.rows + report.runtime_rows],
                   weights_p=report.weights.p, forward_p=report.forward.p,
                   weights=report.weights.line(), forward=report.forward.line(),
                   p53_output_disagreements=list(report.p53_disagreements or ()),
                   p53_verdict_disagreements=list(report.p53_verdict_disagreements or ()))
        if args.plot:
            curve = pr.curves(spec, ds, report, log=log)
            name = cert.get("construction", {}).get("name", "network")
            pr.plot(curve, args.plot, f"{name}, N = {ds.N}, n = {ds.n}")
            print(f"plot: {args.plot}")
            out["curves"] = {k: {str(p): v for p, v in c.items()} for k, c in curve.items()}
    bits = args.bits
    if bits is None:
        params = cert.get("construction", {}).get("params", {})
        mb = params.get("max_bits") if isinstance(params, dict) else None
        bits = int(mb) if isinstance(mb, int) and mb > 0 else None
    if bits is not None:
        clock = time.perf_counter()
        fmt, misses = pr.certify_at(spec, ds, bits)
        took = time.perf_counter() - clock
        if misses:
            status = 1
            print(f"NOT certified at {bits} bits ({fmt.name}): {len(misses)} read positions "
                  f"fail, first: {misses[0]}")
            for m in misses[1:10]:
                print(f"  {m}", file=sys.stderr)
        else:
            print(f"certified at {bits} bits ({fmt.name}, MPFR, every operation correctly "
                  f"rounded): all {ds.N} sequences memorized ({took:.1f}s)")
        out["bits"] = {"p": bits, "format": fmt.name, "misses": [str(m) for m in misses]}
    if args.json:
        from exactmem.files.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(out, indent=1, sort_keys=True) + "\n")
    return status


def vars_of(row: object) -> dict[str, object]:
    return {k: getattr(row, k) for k in row.__slots__}  # type: ignore[attr-defined]
