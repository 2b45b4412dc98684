"""Write a language-model dataset (next token at every position) from token sequences, or
draw uniform random tokens from a seed that the checker regenerates.

    python scripts/lm_dataset.py tokens.npy --vocab 64 -o d.json
    python scripts/lm_dataset.py tokens.txt --vocab 64 -o d.json   # one sequence a line
    python scripts/lm_dataset.py --uniform 7 --vocab 64 --sequences 128 --length 17 -o d.json

A sequence of L tokens becomes L - 1 positions labelled with the token that follows
(docs/trained-models.md, "Datasets").  With ``--uniform SEED`` the rows are drawn by
``exactmem.uniform-tokens/1`` (exactly uniform, SHA-256 in counter mode with rejection
sampling) and the dataset records that generator, so that ``exactmem check`` regenerates
it and calls the bits below the uniform code memorized bits (docs/memorized-bits.md).
Exit 0 written, 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys

from exactmem.datasets.uniform_tokens import uniform_dataset
from exactmem.errors import ExactmemError
from exactmem.lm.tokens import next_token_dataset, read_tokens
from exactmem.model.dataset import save_dataset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokens", nargs="?", help=".npy integer array [N, L] or a text file")
    ap.add_argument("--vocab", type=int, required=True, help="vocabulary size")
    ap.add_argument("--uniform", type=int, metavar="SEED",
                    help="draw uniform random tokens from SEED (0 <= SEED < 2^64) instead")
    ap.add_argument("--sequences", type=int, help="with --uniform: the number of sequences")
    ap.add_argument("--length", type=int,
                    help="with --uniform: tokens a sequence (L; L - 1 labelled positions)")
    ap.add_argument("-o", "--output", required=True, help="dataset file to write")
    args = ap.parse_args()
    if (args.tokens is None) == (args.uniform is None):
        print("lm_dataset: give either a token file or --uniform SEED", file=sys.stderr)
        return 2
    if args.uniform is not None and (args.sequences is None or args.length is None):
        print("lm_dataset: --uniform needs --sequences and --length", file=sys.stderr)
        return 2
    try:
        if args.uniform is not None:
            ds = uniform_dataset(args.uniform, args.vocab, args.sequences, args.length)
        else:
            ds = next_token_dataset(read_tokens(args.tokens), args.vocab)
        save_dataset(ds, args.output)
    except ExactmemError as exc:
        print(f"lm_dataset: {exc}", file=sys.stderr)
        return 2
    drawn = f" (uniform random from seed {args.uniform})" if args.uniform is not None else ""
    print(f"wrote {args.output}: {ds.N} sequences of {ds.n} labelled positions{drawn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
