"""``exactmem check CERT``: run the trusted checker."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from exactmem.commands._args import progress_of
from exactmem.errors import ExactmemError

if TYPE_CHECKING:
    from exactmem.api.result_types import CheckResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="re-verify a certificate with the independent checker",
        description="Prints on stdout what was proved ('c claim: ...') when verified, then one "
                    "line: 's VERIFIED' (exit 0), 's REJECTED' (exit 1: the certificate does "
                    "not prove memorization) or 's UNUSABLE' (exit 2: unreadable or malformed "
                    "input). Every failure (sequence, position, layer) goes to stderr.",
        epilog="example: exactmem check c.json --shards 2")
    p.add_argument("certificate", help="certificate file")
    p.add_argument("--shards", type=int, default=1, metavar="K",
                   help="check K disjoint slices of the sequences in parallel processes "
                        "and combine the verdicts (default: 1, one pass); K is clipped to "
                        "64 and to the number of sequences, the processes to the CPUs: the "
                        "verdict is the one pass's for every K")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --shards: run the shards on this Dask scheduler (needs "
                        "'exactmem[dask]'); workers must see the certificate's path")
    p.add_argument("--weights", metavar="FILE",
                   help="a language-model certificate's bound weights file, read instead of "
                        "the one its model.weights.path names beside it (its length and "
                        "SHA-256 must still match the certificate)")
    p.add_argument("--reference", action="store_true",
                   help="run only the checker's standard-library path (no NumPy fast path "
                        "for the language-model products; the same verdict and counts)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.support import answer

    if args.shards < 1:
        raise ExactmemError(f"--shards: expected a positive number, found {args.shards}")
    return answer(lambda: _check(args))


def _check(args: argparse.Namespace) -> CheckResult:
    from exactmem.api import verbs

    if args.shards > 1 or args.scheduler:
        if not args.quiet:
            slices = verbs.shard_count(args.shards)
            print(f"checking {args.certificate} in {slices} shards"
                  + (" (at most the number of sequences)" if slices > 1 else "")
                  + (f" on {args.scheduler}" if args.scheduler else ""), file=sys.stderr,
                  flush=True)
        result = verbs.check(args.certificate, shards=args.shards,
                             scheduler=args.scheduler, weights=args.weights,
                             reference=args.reference)
    else:
        with progress_of("check", {"forward": "--shards K splits it over K processes"}) \
                as tick:
            tick("read", 0, 0)  # reading and parsing, until the checker's first callback
            result = verbs.check(args.certificate, progress=tick, weights=args.weights,
                                 reference=args.reference)
    for line in result.failures:
        print(f"c {line}", file=sys.stderr)
    if result.claim:
        print(f"c claim: {result.claim}")
    return result
