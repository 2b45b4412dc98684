"""``exactmem prove [FILTER] [--quick]``: run the proof obligations of the repository's
``proofs/`` package (installed as ``exactmem._proofs``)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prove", help="re-check the lemma proofs (Z3 / sympy) of the gadgets and bounds",
        description="Run every proof obligation and print one line per lemma: "
                    "proved / failed / unknown, with its time; progress on stderr. "
                    "Exit 0 when every selected lemma is proved, 1 otherwise.",
        epilog="example: exactmem prove bit-extraction --quick")
    p.add_argument("filter", nargs="?", metavar="FILTER",
                   help="run only the lemmas whose name contains FILTER")
    p.add_argument("--quick", action="store_true",
                   help="prove the bit-extraction lemmas for n <= 12 bits instead of 32")
    p.add_argument("--list", action="store_true", help="list the lemma names and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api import verbs

    if args.list:
        print("\n".join(verbs.lemma_names()))
        return 0
    result = verbs.prove(args.filter, quick=args.quick,
                         on_result=lambda r: print(r.text, flush=True))
    print(f"{result.proved} of {len(result.lemmas)} lemmas proved"
          + (" (quick)" if args.quick else ""))
    return 0 if result else 1
