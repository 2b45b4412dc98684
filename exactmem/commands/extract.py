"""``exactmem extract MODEL DATA -o REPORT``: certified (non-)extraction by greedy decoding."""

from __future__ import annotations

import argparse

from exactmem.commands._args import (
    execution_args,
    positive_int,
    progress_of,
    stderr_log,
    times_line,
)


def register(sub: argparse._SubParsersAction) -> None:
    from exactmem.api.lm import FORMATS

    p = sub.add_parser(
        "extract",
        help="prove which training sequences greedy decoding reproduces from their prefix "
             "(k-extractable memorization), and which it provably does not",
        description="For every sequence of DATA: 'extractable' (proved: greedy decoding from "
                    "its first --prefix tokens reproduces the next --suffix tokens), 'not "
                    "extractable' (proved: at a suffix position, under the true prefix, "
                    "another token's logit lies above the true token's; the position and "
                    "token are named) or 'undecided'; the longest proved span; the float64 "
                    "greedy decode beside it. Writes REPORT (JSON), the same stem with .csv "
                    "and .html, and the certificate REPORT.cert.json, which `exactmem check` "
                    "re-proves (docs/extraction.md). DATA: .npy token ids, .jsonl ('text' or "
                    "'tokens', optional 'count'), an exactmem dataset .json, or a text file "
                    "(one sequence a line). Exit 0 written, 2 unusable input.",
        epilog="example: exactmem extract ckpt.pt train.jsonl --chars --prefix 32 --suffix 32 "
               "-o ext.json && exactmem check ext.cert.json")
    p.add_argument("model", metavar="MODEL", help="language-model checkpoint (GPT-2 "
                   "directory, nanoGPT checkpoint, torch encoder checkpoint)")
    p.add_argument("data", metavar="DATA", help="the sequences (see above)")
    p.add_argument("-o", "--output", required=True, metavar="REPORT",
                   help="the JSON report to write (CSV, HTML and certificate beside it)")
    p.add_argument("--prefix", type=positive_int, default=32, metavar="K",
                   help="tokens given to the decoder (default: 32)")
    p.add_argument("--suffix", type=positive_int, default=32, metavar="M",
                   help="tokens greedy decoding must reproduce (default: 32)")
    p.add_argument("--every-length", action="store_true",
                   help="also count the verdicts for every suffix length 1..M")
    p.add_argument("--chars", action="store_true",
                   help="character-level tokens: the sorted characters of DATA (as nanoGPT's "
                        "char datasets)")
    p.add_argument("--vocab", metavar="FILE",
                   help="character vocabulary: a JSON list of strings by id (or string -> "
                        "id), or a nanoGPT meta.pkl (read without running code)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="MODEL's kind, or auto (detected)")
    p.add_argument("--producer", choices=("auto", "fast", "hybrid", "arb"), default="auto",
                   help="the producer's arithmetic, as for certify-model (default: auto)")
    execution_args(p, "prove, for each extractable sequence, that greedy decoding reproduces "
                      "the suffix")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.extracting import extract

    log = stderr_log(args.quiet)
    with progress_of("extract", {"forward": "the self-check, the checker's own proof of "
                                            "the report's certificate"}) as tick:
        r = extract(args.model, args.data, args.output, prefix=args.prefix,
                    suffix=args.suffix, chars=args.chars, vocab=args.vocab, kind=args.format,
                    producer=args.producer, every_length=args.every_length,
                    execution=args.execution, ulps=args.ulps, log=log,
                    progress=tick)
    log(times_line(r.seconds))
    for row in r.report["sequences"]:
        fw = row["first_wrong"]
        if fw is not None:
            log(f"  sequence {row['sequence']}: not extractable: suffix token "
                f"{fw['suffix_index']} (position {fw['position']}): token {fw['token']} "
                f"proved above the true {fw['label']}")
    s = r.report["summary"]
    print(f"{r} (float64 greedy decode: {s['float_extractable']} reproduce the suffix; "
          f"longest proved span {s['longest_proved_span']}) -> {r.paths['json']}, "
          f"{r.paths['csv'].name}, {r.paths['html'].name}, {r.paths['certificate'].name}")
    if r.execution is not None:
        print(f"  and {sum(r.exec_extractable)} of {len(r.verdicts)} sequences extractable in "
              f"every {r.execution} execution (exp/tanh/erf/rsqrt within {r.ulps} ulps)")
    return 0
