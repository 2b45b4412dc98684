"""``exactmem precision CERT``: where float precision breaks memorization."""

from __future__ import annotations

import argparse
import sys


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
                    "pass at P bits must memorize every sequence: exit 0 certified, 1 not. "
                    "A language-model certificate: per format (float64, float32, bfloat16, "
                    "float16), the certified positions proved for every execution of that "
                    "format and those held in one torch run.",
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
    p.add_argument("--ulps", type=int, default=None, metavar="K",
                   help="language-model certificates: the execution model's accuracy of "
                        "exp/tanh/erf/rsqrt in ulps (default: certify-model --execution's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.float_report import fidelity_report

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report = fidelity_report(args.certificate, device=args.device, bits=args.bits,
                             search=not args.no_search, scan=args.scan, plot=args.plot,
                             json_out=args.json, log=log, ulps=args.ulps)
    for line in report.lines:
        print(line)
    return 0 if report.certified else 1
