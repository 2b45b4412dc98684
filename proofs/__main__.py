"""``python -m proofs [FILTER]``: run the proof obligations, one line per lemma."""

import sys

from proofs.framework import run


def main(argv: list[str]) -> int:
    selected = argv[0] if argv else None
    bad = 0
    for result in run(selected):
        print(result.line(), flush=True)
        bad += result.outcome.status != "proved"
    return 1 if bad else 0


sys.exit(main(sys.argv[1:]))
