"""``exactmem prove``: run the proof obligations in ``proofs/``."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prove", help="re-check the lemma proofs (Z3 / sympy) in proofs/",
        description="Run every proof obligation and print one line per lemma: "
                    "proved / failed / unknown, with its time.",
        epilog="example: exactmem prove bit_extraction")
    p.add_argument("filter", nargs="?", help="run only lemmas whose name contains this")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from proofs.framework import run as run_all

    bad = 0
    count = 0
    for result in run_all(args.filter):
        count += 1
        print(result.line(), flush=True)
        bad += result.outcome.status != "proved"
    print(f"{count - bad} of {count} lemmas proved")
    return 1 if bad else 0
