"""``exactmem search``: the smallest hardmax Transformer that memorizes a dataset (Z3).

Exit codes: 0 when a memorizing network was found (and certified), 1 when none was
(infeasible or unknown), 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXAMPLE = """example:
  exactmem search xor.json --readout scalar --minimize ff-width --json
  exactmem search data.json --minimize params --certificates certs/
  exactmem search small.json --bits 2 --minimize params --proofs P -q
  exactmem search xor.json --bits 2 --residual off --minimize ff-width --proofs proofs/ --json
  exactmem search --all-labellings --N 6 --n 2 --vocab 3 --results runs/n6.jsonl
  exactmem search --all-labellings --N 6 --n 2 --vocab 3 --executor dask --scheduler tcp://host:8786
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", help="find (or refute) the smallest hardmax Transformer memorizing a dataset",
        description="Encode 'a hardmax Transformer of this shape memorizes the dataset', "
                    "sweep shapes and report the smallest found one; every found network is "
                    "certified by the checker. Two kinds of answer, named in every summary "
                    "line. Real weights (the default): Z3 decides, and an infeasible answer "
                    "is the solvers' word (Z3's UNSAT, cross-checked by a second encoding "
                    "and cvc5: proof_kind z3, z3+enc2, z3+cvc5, z3+enc2+cvc5). With --bits "
                    "B: B-bit integer weights, SAT decides, and an infeasible answer is an "
                    "LRAT proof checked before it is reported (proof_kind lrat; --proofs "
                    "DIR writes each CNF and proof for 'exactmem check-proof'). A refutation "
                    "by label consistency (equal inputs, different labels) holds in both. "
                    "Sizes are capped (docs/cli.md, 'search'); beyond a cap: exit 2.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", help="dataset file (exactmem.dataset/1)")
    g = p.add_argument_group("shape")
    g.add_argument("--layers", type=int, default=1)
    g.add_argument("--heads", type=int, default=1)
    g.add_argument("--d-model", type=int, default=1)
    g.add_argument("--head-dim", type=int, default=None, help="default: --d-model")
    g.add_argument("--ff-width", type=int, default=0)
    g.add_argument("--residual", choices=("on", "off"), default="on")
    g.add_argument("--readout", choices=("argmax", "scalar"), default="argmax")
    e = p.add_argument_group("encoding")
    e.add_argument("--ties", choices=("split", "margin"), default="split",
                   help="hardmax ties: split weight over tied keys (exact semantics), or "
                        "exclude ties between different tokens (a restriction)")
    e.add_argument("--bound", default=None, help="bound |w| <= B on every weight (rational)")
    e.add_argument("--timeout", type=float, default=60.0, help="seconds per query")
    e.add_argument("--rlimit", type=int, default=None, metavar="N",
                   help="real weights: Z3 resource limit per solver call (deterministic: a "
                        "rerun gets the same answers under any load; recorded in the JSON)")
    e.add_argument("--encoding", choices=("positions", "multiset"), default="positions",
                   help="real weights: the encoding Z3 decides (the other one cross-checks "
                        "every refutation)")
    e.add_argument("--cvc5-rlimit", type=int, default=20_000, metavar="N",
                   help="real weights: cvc5 resource limit of the cross-check of every "
                        "refutation (0: no cvc5)")
    e.add_argument("--no-crosscheck", action="store_true",
                   help="real weights: report Z3's refutations without second opinions")
    e.add_argument("--bits", type=int, default=None, metavar="B",
                   help="b-bit integer weights in [-2^(B-1), 2^(B-1)), decided by SAT; "
                        "refutations come with a checked LRAT proof")
    e.add_argument("--conflicts", type=int, default=None, metavar="N",
                   help="with --bits: SAT conflict budget per query (deterministic; default "
                        "1000000)")
    e.add_argument("--proofs", type=Path, default=None, metavar="DIR",
                   help="with --bits: write the DIMACS CNF and LRAT proof of every "
                        "infeasible answer into this folder")
    e.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="seconds for the whole run; queries get at most what is left, shapes "
                        "not reached are unknown")
    s = p.add_argument_group("sweep")
    s.add_argument("--minimize", choices=("ff-width", "heads", "params"), default=None)
    s.add_argument("--max-layers", type=int, default=2)
    s.add_argument("--max-heads", type=int, default=2)
    s.add_argument("--max-d-model", type=int, default=2)
    s.add_argument("--max-ff-width", type=int, default=4)
    s.add_argument("--certificates", type=Path, default=None,
                   help="write the certificate of every found network into this folder")
    a = p.add_argument_group("all labellings")
    a.add_argument("--all-labellings", "--all-labelings", action="store_true",
                   help="answer every labelling of the input sequences (the dataset's, or "
                        "generated with --N --n --vocab); --all-labelings is the same flag")
    a.add_argument("--N", type=int, default=None, dest="N")
    a.add_argument("--n", type=int, default=None, dest="n")
    a.add_argument("--vocab", type=int, default=None)
    a.add_argument("--classes", type=int, default=2)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--results", type=Path, default=Path("search-results.jsonl"),
                   help="JSON-lines results file; a rerun resumes from it")
    a.add_argument("--retry-unknown", action="store_true",
                   help="solve stored unknown answers again (they are retried anyway when "
                        "--timeout is larger than the one they ran under)")
    a.add_argument("--no-transfer", action="store_true",
                   help="do not re-fit the tails of earlier witnesses before a full query "
                        "(real weights; docs/search.md, 'Witness transfer')")
    a.add_argument("--random-fronts", type=int, default=None, metavar="COUNT",
                   help="random fronts tried on the labellings no earlier witness "
                        "answered (default 4000000; 0: none)")
    a.add_argument("--grid-fronts", type=int, default=None, metavar="COUNT",
                   help="with --bits and one-dimensional shapes: fronts of the weight grid "
                        "walked before the SAT queries (default 200000, every front when "
                        "there are fewer; 0: none; docs/search.md, 'Grid enumeration')")
    a.add_argument("--sweep-conflicts", type=int, default=None, metavar="COUNT",
                   help="with --bits and two labels: conflicts per labelling on the one "
                        "incremental solver of a shape before the labelling gets its own "
                        "query (default 100000; 0: no sweep; docs/search.md, 'Label sweep')")
    a.add_argument("--first-failure", action="store_true",
                   help="stop a shape at its first infeasible labelling")
    a.add_argument("--executor", choices=("processes", "serial", "dask"), default="processes")
    a.add_argument("--workers", type=int, default=None)
    a.add_argument("--scheduler", default=None, help="Dask scheduler address")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.searching import search

    result = search(
        args.data, layers=args.layers, heads=args.heads, d_model=args.d_model,
        head_dim=args.head_dim, ff_width=args.ff_width, residual=args.residual == "on",
        readout=args.readout, ties=args.ties, bound=args.bound, timeout=args.timeout,
        budget=args.budget, minimize=args.minimize, max_layers=args.max_layers,
        max_heads=args.max_heads, max_d_model=args.max_d_model,
        max_ff_width=args.max_ff_width, certificates=args.certificates, bits=args.bits,
        conflicts=args.conflicts, proofs=args.proofs, rlimit=args.rlimit,
        encoding=args.encoding, cvc5_rlimit=args.cvc5_rlimit,
        crosscheck=not args.no_crosscheck, all_labellings=args.all_labellings, N=args.N,
        n=args.n, vocab=args.vocab, classes=args.classes, seed=args.seed,
        results=args.results, retry_unknown=args.retry_unknown,
        transfer=not args.no_transfer, random_fronts=args.random_fronts,
        grid_fronts=args.grid_fronts, sweep_conflicts=args.sweep_conflicts,
        first_failure=args.first_failure, executor=args.executor, workers=args.workers,
        scheduler=args.scheduler, on_result=None if args.quiet else _echo,
        show_progress=not args.quiet)
    report = result.report
    if args.json:
        print(json.dumps(report, sort_keys=True))
    elif args.all_labellings:
        for e in report["sizes"]:
            c = e["classes"]
            print(f"{_label(e['shape'])}  params {e['params']!s:>4}  {e['status']:10s} "
                  f"classes found {c['found']} infeasible {c['infeasible']} "
                  f"unknown {c['unknown']} unanswered {c['unanswered']}")
        print(str(result))
        print(f"{report['reused']} answers reused from {report['results']}, "
              f"{report['padded']} from padded smaller witnesses, {report['solved']} solved")
    else:
        for e in report["sizes"]:
            sh = e["shape"]
            label = f"{_label(sh)} {'res' if sh['residual'] else 'nores'}"
            why = e.get("proof_kind") or e.get("reason") or ""
            extra = f"  {e['certificate']}" if e.get("certificate") else ""
            if e.get("proof"):
                extra = f"  {e['cnf']} {e['proof']}"
            print(f"{label:28s} params {e['params']!s:>5}  {e['status']:10s} "
                  f"{e.get('seconds', 0):8.2f}s  {why}{extra}")
        print(str(result))
    return 0 if result.status == "found" else 1


def _label(sh: dict[str, Any]) -> str:
    return (f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} "
            f"q{sh['ff_width']}")


def _echo(res: Any) -> None:
    print(f"  {res.shape.label():28s} params {res.params:4d}  {res.status:10s} "
          f"{res.seconds:7.2f}s", file=sys.stderr, flush=True)
