"""``exactmem check CERT``: run the trusted checker."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="re-verify a certificate with the independent checker",
        description="Prints one line on stdout, 's VERIFIED' or 's REJECTED'; every failure "
                    "(sequence, position, layer) on stderr. Exit 0 verified, 1 rejected, "
                    "2 unreadable input.",
        epilog="example: exactmem check c.json")
    p.add_argument("certificate", help="certificate file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.checker import check_file

    report = check_file(args.certificate)
    for line in report.failures:
        print(f"c {line}", file=sys.stderr)
    print("s VERIFIED" if report.verified else "s REJECTED")
    return report.exit_code
