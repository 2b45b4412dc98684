"""``python -m proofs [FILTER] [--quick] [--list] [--json]`` (in an installation
``python -m exactmem._proofs``): run the proof obligations, one line per lemma.

``exactmem prove`` runs this program (:mod:`exactmem.api.lemmas`): ``proofs/`` sits above
the package, it imports exactmem and exactmem never imports it.  With ``--json`` every
line of stdout is one JSON object: ``{"name", "statement"}`` per lemma with ``--list``,
``{"name", "status", "detail", "seconds", "quick", "line"}`` per lemma run, or
``{"error"}`` when the selection is empty.  Exit 0 when every selected lemma is proved,
1 otherwise, 2 for an empty selection.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .framework import Lemma, discover, run, select


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m proofs",
                                description="Run the proof obligations, one line per lemma.")
    p.add_argument("filter", nargs="?", metavar="FILTER",
                   help="run only the lemmas whose name contains FILTER")
    p.add_argument("--name", action="append", default=None, metavar="NAME",
                   help="run the lemma named exactly NAME (repeatable)")
    p.add_argument("--quick", action="store_true",
                   help="prove the bit-extraction lemmas for n <= 12 bits instead of 32")
    p.add_argument("--list", action="store_true", help="list the lemma names and exit")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


def _selected(args: argparse.Namespace) -> tuple[list[Lemma], str]:
    """The lemmas asked for, or none and the reason."""
    lemmas = select(args.filter)
    names = [lemma.name for lemma in discover()]
    if args.name is not None:
        unknown = sorted(set(args.name) - set(names))
        if unknown:
            return [], f"no lemma is named {unknown[0]!r}; the lemmas: " + ", ".join(names)
        lemmas = [lemma for lemma in lemmas if lemma.name in args.name]
    if not lemmas:
        return [], f"no lemma name contains {args.filter!r}; the lemmas: " + ", ".join(names)
    return lemmas, ""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quiet:
        from exactmem import progress

        progress.configure(quiet=True)
    lemmas, why = _selected(args)
    if not lemmas:
        if args.json:
            print(json.dumps({"error": why}))
        else:
            print(f"python -m proofs: {why}", file=sys.stderr)
        return 2
    if args.list:
        for lemma in lemmas:
            print(json.dumps({"name": lemma.name, "statement": lemma.statement})
                  if args.json else lemma.name)
        return 0
    bad = 0
    for result in run(quick=args.quick, lemmas=lemmas):
        bad += result.outcome.status != "proved"
        print(json.dumps({"name": result.lemma.name, "status": result.outcome.status,
                          "detail": result.outcome.detail, "seconds": result.seconds,
                          "quick": result.quick, "line": result.line()})
              if args.json else result.line(), flush=True)
    if not args.json:
        print(f"{len(lemmas) - bad} of {len(lemmas)} lemmas proved"
              + (" (quick)" if args.quick else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
