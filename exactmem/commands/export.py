"""``exactmem export CERT --format torch|safetensors|onnx -o OUT``: the certified network
in the float formats users load."""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

FORMATS = ("torch", "safetensors", "onnx")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write a certified network as a torch state_dict, safetensors or ONNX",
        description="Write the network of CERT with every weight rounded once to nearest into "
                    "--dtype. torch: a state_dict (.pt) with the structure in '_extra_state'; "
                    "safetensors: tensors plus an exact-rational sidecar OUT.exact.json, bound "
                    "by SHA-256 in the metadata; onnx: MatMul/Softmax-level graph with input "
                    "'tokens' or 'inputs' and outputs 'labels' and 'outputs'. The certificate "
                    "is re-checked first (skip with --no-check). Exit 0 written, 1 the "
                    "certificate is rejected, 2 unusable input.",
        epilog="example: exactmem export c.json --format onnx --dtype float32 -o net.onnx",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("certificate", help="certificate file")
    p.add_argument("--format", "-f", required=True, choices=FORMATS, help="file format")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write")
    p.add_argument("--dtype", default="float64",
                   choices=("float64", "float32", "bfloat16", "float16"),
                   help="float type of the weights (onnx: float64/float32; safetensors: "
                        "no bfloat16)")
    p.add_argument("--sidecar", default=None,
                   help="safetensors only: exact sidecar path (default OUT.exact.json)")
    p.add_argument("--no-check", action="store_true",
                   help="do not re-run the checker on the certificate first")
    p.set_defaults(func=run)


#: the optional package each format needs (all in the ``export`` extra)
NEEDS = {"torch": ("torch", "export --format torch"),
         "safetensors": ("safetensors", "export --format safetensors"),
         "onnx": ("onnx", "export --format onnx")}


def run(args: argparse.Namespace) -> int:
    from exactmem.adapters import need
    from exactmem.adapters.formats import FORMATS as FLOATS
    from exactmem.adapters.formats import round_to_format
    from exactmem.adapters.skeleton import named_matrices
    from exactmem.certificate import read_certificate, spec_from_certificate
    from exactmem.errors import SpecError
    from exactmem.model.atomic import check_writable

    need(*NEEDS[args.format])
    check_writable(args.output)
    if args.format == "safetensors" and args.sidecar:
        check_writable(args.sidecar)
    cert = read_certificate(args.certificate)
    if not args.no_check:
        from exactmem.checker import check_certificate

        report = check_certificate(cert)
        if not report.verified:
            for line in report.failures[:20]:
                print(f"  {line}", file=sys.stderr)
            print(f"not exported: the checker rejects {args.certificate}")
            return 1
    spec = spec_from_certificate(cert)
    out = Path(args.output)
    if args.format == "torch":
        from exactmem.adapters.torch import save_state_dict

        save_state_dict(spec, str(out), args.dtype)
        extra = ""
    elif args.format == "safetensors":
        from exactmem.adapters.safetensors_io import write_safetensors

        _, side = write_safetensors(spec, out, args.certificate, args.dtype, args.sidecar)
        extra = f"; exact sidecar {side}"
    else:
        from exactmem.adapters.onnx_export import write_onnx

        if args.dtype not in ("float64", "float32"):
            raise SpecError(f"ONNX export supports float64 and float32, found {args.dtype}")
        write_onnx(spec, out, args.dtype,
                   {"exactmem.certificate_digest": str(cert.get("digest", ""))})
        extra = ""
    fmt = FLOATS[args.dtype]
    total = rounded = overflow = 0
    for _, m, _ in named_matrices(spec):
        small = m.den == 1 and all(abs(x) < (1 << fmt.precision) for r in m.num for x in r)
        for row in m.num:
            total += len(row)
            if small:
                continue
            for x in row:
                v = round_to_format(Fraction(x, m.den), fmt)
                overflow += v is None
                rounded += v is not None and v != Fraction(x, m.den)
    print(f"wrote {out} ({args.format}, {args.dtype}): {total} weights, {rounded} rounded, "
          f"{overflow} overflowed to infinity{extra}")
    return 0
