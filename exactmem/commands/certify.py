"""``exactmem certify DATA --construction NAME -o CERT``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exactmem.api.support import constructions
from exactmem.commands._args import stderr_log
from exactmem.errors import ExactmemError


def register(sub: argparse._SubParsersAction) -> None:
    reg = constructions()
    p = sub.add_parser(
        "certify", help="build a construction for a dataset, check it, write a certificate",
        description="Build the named construction for DATA in exact arithmetic, evaluate it on "
                    "every sequence, run the independent checker, and only then write CERT "
                    "(atomically). Constructions: " + ", ".join(reg),
        epilog="example: exactmem certify d.json --construction lookup -o c.json",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("data", help="dataset file (exactmem.dataset/1 JSON)")
    p.add_argument("--construction", "-c", required=True, choices=list(reg), metavar="NAME",
                   help="construction to build: " + ", ".join(reg))
    p.add_argument("-o", "--output", required=True, help="certificate file to write")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print only the verdict (no notes, no progress)")
    p.add_argument("--shards", type=int, default=1, metavar="K",
                   help="evaluate and check K disjoint slices of the sequences in parallel "
                        "(local processes) and join them; K is clipped to 64 and to the "
                        "number of sequences, the processes to the CPUs")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --shards: run the slices on this Dask scheduler (needs "
                        "exactmem[dask])")
    p.add_argument("--bind-dataset", action="store_true",
                   help="bind DATA by its SHA-256 and relative path instead of embedding it")
    p.add_argument("--float-exact", action="append", metavar="FORMAT",
                   choices=["bfloat16", "float16", "float32", "float64",
                            "bfloat16-weights/float32", "int8"],
                   help="claim that the network is float-exact in FORMAT (repeatable; "
                        "docs/float-exact.md); with --max-bits P the narrowest format with P "
                        "significand bits is claimed unless given")
    seen: dict[str, type] = {}
    for con in reg.values():
        for opt in con.options:
            if opt.name in seen:
                continue
            seen[opt.name] = opt.type
            flag = "--" + opt.name.replace("_", "-")
            p.add_argument(flag, dest=f"opt_{opt.name}", type=opt.type, default=None,
                           metavar=opt.name.upper(),
                           help=f"[{con.name}...] {opt.help} (default {opt.default})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api import verbs

    con = constructions()[args.construction]
    known = {o.name for o in con.options}
    options = {}
    for key, value in vars(args).items():
        if key.startswith("opt_") and value is not None:
            name = key[4:]
            if name not in known:
                raise ExactmemError(f"--{name.replace('_', '-')} does not apply to "
                                    f"{con.name}; its options: {sorted(known) or 'none'}")
            options[name] = value

    log = stderr_log(args.quiet)
    if args.shards < 1:
        raise ExactmemError(f"--shards: expected a positive number, found {args.shards}")
    out = Path(args.output)
    result = verbs.certify(args.data, con.name, output=out, bind_dataset=args.bind_dataset,
                           log=log, float_exact=args.float_exact, shards=args.shards,
                           scheduler=args.scheduler, **options)
    for note in result.notes:
        log(note)
    if not result.verified:
        for line in result.failures[:50]:
            print(f"  {line}", file=sys.stderr)
        more = len(result.failures) - 50
        if more > 0:
            print(f"  ... and {more} more failures", file=sys.stderr)
        print(f"not certified: the checker rejected the network; {out} was not written")
        return 1
    sz = result.sizes
    claims = (result.certificate or {}).get("claims", {})
    print(f"certified {con.name} on {result.N} sequences -> {out} "
          f"(params nonzero {sz.params_nonzero}, dense {sz.params_dense}, "
          f"depth {sz.depth}, width {sz.width}, max bits {sz.max_bits})"
          + (f"; float-exact in {', '.join(fe)}" if (fe := claims.get("float_exact")) else ""))
    return 0
