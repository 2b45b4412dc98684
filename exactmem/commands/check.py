"""``exactmem check CERT``: run the trusted checker."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="re-verify a certificate with the independent checker",
        description="Prints on stdout what was proved ('c claim: ...') when verified, then one "
                    "line: 's VERIFIED' (exit 0), 's REJECTED' (exit 1: the certificate does "
                    "not prove memorization) or 's UNUSABLE' (exit 2: unreadable or malformed "
                    "input). Every failure (sequence, position, layer) goes to stderr.",
        epilog="example: exactmem check c.json")
    p.add_argument("certificate", help="certificate file")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem import progress
    from exactmem.checker import check_file

    if args.quiet:
        progress.configure(quiet=True)
    tick, close = progress.hook("check")
    try:
        report = check_file(args.certificate, progress=tick)
    finally:
        close()
    for line in report.failures:
        print(f"c {line}", file=sys.stderr)
    if report.claim:
        print(f"c claim: {report.claim}")
    print(report.verdict)
    return report.exit_code
