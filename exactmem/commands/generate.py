"""``exactmem generate``: write a random dataset."""

from __future__ import annotations

import argparse

from exactmem.commands._args import positive_int
from exactmem.errors import DatasetError

#: the largest value each size flag accepts (docs/cli.md, "generate: size caps")
CAPS = {"N": 1_000_000, "n": 4096, "vocab": 1_000_000, "classes": 1_000_000, "dim": 1024,
        "heads": 1024, "head_dim": 1024}
#: the most values a dataset may hold: N * n token ids (times dim for vector tokens), and
#: vocab * dim vocabulary entries
MAX_VALUES = 10_000_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="write a random dataset (consistent labels, distinct sequences)",
        description="Write N distinct random sequences of length n with labels that depend only "
                    "on the multiset of tokens and the token at the read position (consistent in "
                    "the sense of Kajitsuka & Sato eq. 5/10). Token ids by default; --dim gives "
                    "rational vector tokens drawn from a vocabulary of --vocab vectors. "
                    "--for NAME writes data that satisfies that construction's assumptions. "
                    "Sizes are capped (N <= 10^6, n <= 4096, vocab and classes <= 10^6, dim, "
                    "heads, head-dim <= 1024, at most 10^7 values): beyond, one line, exit 2.",
        epilog="example: exactmem generate --task next-token --N 1000 --n 16 --vocab 64 "
               "--classes 8 --seed 1 -o d.json",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("next-token", "seq2seq"), default="next-token",
                   help="label the last token (next-token) or every token (seq2seq)")
    p.add_argument("--N", type=positive_int, default=None,
                   help="number of sequences (default 100)")
    p.add_argument("--n", type=positive_int, default=None, help="sequence length (default 8)")
    p.add_argument("--vocab", type=positive_int, default=None,
                   help="vocabulary size (default 16)")
    p.add_argument("--dim", type=positive_int, default=None,
                   help="vector tokens of this dimension")
    p.add_argument("--classes", type=positive_int, default=None,
                   help="number of labels (default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--labels", choices=("consistent", "random"), default="consistent",
                   help="'random' may give inconsistent datasets")
    p.add_argument("--for", dest="for_construction", default=None, metavar="NAME",
                   help="generate for an attention construction (mahdavi2024-mha, dana2024-aot)")
    p.add_argument("--heads", type=positive_int, default=None,
                   help="with --for: number of heads")
    p.add_argument("--head-dim", type=positive_int, default=None,
                   help="with --for: head dimension")
    p.add_argument("--shared-context", action="store_true",
                   help="with --for mahdavi2024-mha: one context shared by every example")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="dataset file to write (exactmem.dataset/1 JSON)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api import verbs
    from exactmem.api.support import check_writable

    check_sizes(args)
    out = check_writable(args.output)
    kw: dict[str, object] = {}
    if args.for_construction:  # the attention constructions' sizes
        kw = {k: v for k, v in (("heads", args.heads), ("head_dim", args.head_dim))
              if v is not None}
        if args.shared_context:
            kw["shared_context"] = True
    ds = verbs.generate(args.task, args.N, args.n, args.vocab, args.classes, args.seed,
                        dim=args.dim, labels=args.labels,
                        for_construction=args.for_construction, output=out, **kw)
    print(f"wrote {args.output}: N = {ds.N}, n = {ds.n}, {ds.task}, {ds.inputs}")
    return 0


def check_sizes(args: argparse.Namespace) -> None:
    """Refuse sizes beyond :data:`CAPS` / :data:`MAX_VALUES` before any work (one line)."""
    for name, cap in CAPS.items():
        value = getattr(args, name)
        if value is not None and value > cap:
            flag = "--" + name.replace("_", "-")
            raise DatasetError(f"{flag} {value} exceeds the cap of {cap:,} (docs/cli.md, "
                               f"generate: size caps)")
    N, n = _given(args.N, 100), _given(args.n, 8)  # noqa: N806
    dim = args.dim or 1
    if N * n * dim > MAX_VALUES:
        what = "N * n * dim" if args.dim else "N * n"
        raise DatasetError(f"{what} = {N * n * dim:,} values exceeds the cap of "
                           f"{MAX_VALUES:,} (docs/cli.md, generate: size caps)")
    if args.dim and _given(args.vocab, 16) * args.dim > MAX_VALUES:
        raise DatasetError(f"vocab * dim = {_given(args.vocab, 16) * args.dim:,} values exceeds "
                           f"the cap of {MAX_VALUES:,} (docs/cli.md, generate: size caps)")


def _given(value: int | None, default: int) -> int:
    return default if value is None else value
