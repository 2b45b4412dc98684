"""Write a language-model dataset (next token at every position) from token sequences.

    python scripts/lm_dataset.py tokens.npy --vocab 64 -o d.json
    python scripts/lm_dataset.py tokens.txt --vocab 64 -o d.json   # one sequence a line

A sequence of L tokens becomes L - 1 positions labelled with the token that follows
(docs/trained-models.md, "Datasets").  Exit 0 written, 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys

from exactmem.errors import ExactmemError
from exactmem.lm.tokens import next_token_dataset, read_tokens
from exactmem.model.dataset import save_dataset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokens", help=".npy integer array [N, L] or a text file")
    ap.add_argument("--vocab", type=int, required=True, help="vocabulary size")
    ap.add_argument("-o", "--output", required=True, help="dataset file to write")
    args = ap.parse_args()
    try:
        ds = next_token_dataset(read_tokens(args.tokens), args.vocab)
        save_dataset(ds, args.output)
    except ExactmemError as exc:
        print(f"lm_dataset: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {ds.N} sequences of {ds.n} labelled positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
