"""``exactmem check-proof CNF PROOF``: check a DRUP/DRAT refutation with the trusted checker."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-proof", help="verify that a DRUP/DRAT proof refutes a DIMACS CNF",
        description="Forward-checks every lemma of a textual DRUP/DRAT proof (RUP, else RAT) "
                    "against a strict DIMACS CNF with the standard-library checker "
                    "exactmem.checker.drup. Prints one line: 's VERIFIED' (exit 0: the CNF is "
                    "unsatisfiable), 's REJECTED' (exit 1: a lemma fails or no empty clause "
                    "is derived) or 's UNUSABLE' (exit 2: malformed input or a resource "
                    "limit); reasons go to stderr.",
        epilog="example: exactmem check-proof proofs/q1.cnf proofs/q1.drup")
    p.add_argument("cnf", help="DIMACS CNF file")
    p.add_argument("proof", help="textual DRUP/DRAT proof file")
    p.add_argument("--max-steps", type=int, default=None,
                   help="limit on propagation steps (default: the checker's limit)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.checker.drup import MAX_STEPS, check_proof_files

    report = check_proof_files(args.cnf, args.proof, args.max_steps or MAX_STEPS)
    for line in report.reasons:
        print(f"c {line}", file=sys.stderr)
    if report.verdict == "s VERIFIED":
        print(f"c {report.lemmas} lemmas checked, {report.deletions} deletions applied",
              file=sys.stderr)
    print(report.verdict)
    return report.exit_code
