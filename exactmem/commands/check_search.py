"""``exactmem check-search RESULT.json``: one verdict for a whole bit-bounded search
answer, by the trusted checker (:mod:`exactmem.checker.proofs.search_check`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exactmem.api.result_types import CheckResult


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-search", help="verify every size of a bit-bounded search answer (--bits)",
        description="Re-checks an answer of 'exactmem search DATA --bits B --json' with the "
                    "standard-library checker: every found size's certificate verifies on "
                    "the answer's dataset and has the shape, parameter count and B-bit "
                    "weights claimed; every infeasible size's CNF is re-derived from the "
                    "dataset, shape, bits and options by the trusted encoder and must equal "
                    "the file, whose LRAT proof must refute it; files match their SHA-256. "
                    "Prints one line: 's VERIFIED' (exit 0), 's REJECTED' (exit 1: a claim "
                    "fails) or 's UNUSABLE' (exit 2: a missing or malformed file, or a "
                    "limit); reasons go to stderr. Files named in the answer are relative to "
                    "its folder (or --base). The results store of 'search --all-labellings "
                    "--bits B --results R.jsonl' (or the --json answer naming it) is read "
                    "too: every record's network run on its labelling, every refuted "
                    "labelling's CNF re-derived and its proof checked, and per shape what "
                    "the records establish (shatters, does not shatter, open).",
        epilog="example: exactmem search data.json --bits 2 --minimize params --proofs P "
               "--json > answer.json && exactmem check-search answer.json; "
               "exactmem check-search search-results.jsonl")
    p.add_argument("answer", help="the JSON answer of 'exactmem search --bits ... --json'")
    p.add_argument("--base", default=None, metavar="DIR",
                   help="folder the answer's file names are relative to (default: the "
                        "answer's folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.support import answer

    return answer(lambda: _check(args))


def _check(args: argparse.Namespace) -> CheckResult:
    from exactmem.api.proofs import check_search

    result = check_search(args.answer, args.base)
    for line in result.failures + result.notes:
        print(f"c {line}", file=sys.stderr)
    return result
