"""``exactmem check-proof CNF PROOF``: check a refutation (LRAT, or DRUP/DRAT) with the
trusted checker."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exactmem.api.result_types import CheckResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-proof", help="verify that an LRAT or DRUP/DRAT proof refutes a DIMACS CNF",
        description="Checks a textual refutation of a strict DIMACS CNF with the "
                    "standard-library checkers: LRAT (exactmem.checker.proofs.lrat: every lemma by "
                    "unit propagation along its hints) or DRUP/DRAT (exactmem.checker.proofs.drup: "
                    "backward RUP, else RAT). Prints one line: 's VERIFIED' (exit 0: the CNF "
                    "is unsatisfiable -- only that, not what it encodes: see check-search), "
                    "'s REJECTED' (exit 1: a lemma fails or no empty "
                    "clause is derived) or 's UNUSABLE' (exit 2: malformed input or a "
                    "resource limit); reasons go to stderr.",
        epilog="example: exactmem check-proof proofs/q1.cnf proofs/q1.lrat")
    p.add_argument("cnf", help="DIMACS CNF file")
    p.add_argument("proof", help="textual LRAT or DRUP/DRAT proof file")
    p.add_argument("--format", choices=("auto", "lrat", "drup"), default="auto",
                   help="proof format (auto: lrat for a .lrat file, drup otherwise)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="limit on propagation steps (default: the checker's limit)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.support import answer

    return answer(lambda: _check(args))


def _check(args: argparse.Namespace) -> CheckResult:
    from exactmem.api.proofs import check_proof

    result = check_proof(args.cnf, args.proof, args.format, args.max_steps)
    for line in result.failures:
        print(f"c {line}", file=sys.stderr)
    for line in result.notes:
        print(f"c {line}", file=sys.stderr)
    if result.verified:
        print("c claim: this CNF is unsatisfiable (not what it encodes: exactmem "
              "check-search binds a search answer's CNF to its question)")
    return result
