"""``exactmem search``: the smallest hardmax Transformer that memorizes a dataset (Z3).

Exit codes: 0 when a memorizing network was found (and certified), 1 when none was
(infeasible or unknown), 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

EXAMPLE = """example:
  exactmem search xor.json --readout scalar --minimize ff-width --json
  exactmem search data.json --minimize params --certificates certs/
  exactmem search xor.json --bits 2 --residual off --minimize ff-width --proofs proofs/ --json
  exactmem search --all-labelings --N 6 --n 2 --vocab 3 --results runs/n6.jsonl
  exactmem search --all-labelings --N 6 --n 2 --vocab 3 --executor dask --scheduler tcp://host:8786
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search", help="find (or refute) the smallest hardmax Transformer memorizing a dataset",
        description="Encode 'a hardmax Transformer of this shape memorizes the dataset' for Z3, "
                    "sweep shapes and report the smallest found one; every found network is "
                    "certified by the checker. An infeasible answer is Z3's opinion, "
                    "cross-checked by a second encoding and cvc5 (proof_kind z3, z3+enc2, "
                    "z3+cvc5, z3+enc2+cvc5), unless it comes from label consistency.",
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
    a = p.add_argument_group("all labelings")
    a.add_argument("--all-labelings", action="store_true",
                   help="answer every labelling of the input sequences (the dataset's, or "
                        "generated with --N --n --vocab)")
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
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def _base_shape(args: argparse.Namespace) -> Any:
    from exactmem.search.shape import Shape

    return Shape(layers=args.layers, heads=args.heads, d_model=args.d_model,
                 head_dim=args.head_dim or args.d_model, ff_width=args.ff_width,
                 residual=args.residual == "on", readout=args.readout)


def run(args: argparse.Namespace) -> int:
    from exactmem import progress
    from exactmem.arith import to_rational
    from exactmem.errors import DatasetError
    from exactmem.search.encoding import EncodeOptions
    from exactmem.search.sweep import Limits

    if args.quiet:
        progress.configure(quiet=True)
    if args.budget is not None and args.budget <= 0:
        raise DatasetError(f"--budget: expected a positive number of seconds, found "
                           f"{args.budget}")
    if args.bits is not None:
        if args.bits < 1:
            raise DatasetError(f"--bits: expected a positive number of bits, found {args.bits}")
        if args.bound or args.ties != "split":
            raise DatasetError("--bits fixes the weights to a b-bit integer grid with exact "
                               "ties; it cannot be combined with --bound or --ties margin")
        if args.rlimit is not None:
            raise DatasetError("--rlimit is Z3's budget for real weights; with --bits the "
                               "budget is --conflicts")
    elif args.proofs is not None or args.conflicts is not None:
        raise DatasetError("--proofs and --conflicts need --bits (real-valued refutations "
                           "are Z3's word, with no proof to write)")
    for name in ("rlimit", "cvc5_rlimit", "random_fronts", "grid_fronts",
                 "sweep_conflicts"):
        value = getattr(args, name, None)
        if value is not None and value < 0:
            raise DatasetError(f"--{name.replace('_', '-')}: expected a non-negative count, "
                               f"found {value}")
    args.solver = {"rlimit": args.rlimit or None, "encoding": args.encoding,
                   "crosscheck": not args.no_crosscheck,
                   "cvc5_rlimit": args.cvc5_rlimit or None}
    base = _base_shape(args)
    bound: Fraction | None = to_rational(args.bound, "--bound") if args.bound else None
    opts = EncodeOptions(ties=args.ties, bound=bound)
    limits = Limits(args.max_layers, args.max_heads, args.max_d_model, args.max_ff_width)
    if args.all_labelings:
        return _all_labelings(args, base, limits, bound)
    if not args.data:
        raise DatasetError("search: give a dataset file, or --all-labelings with --N --n --vocab")
    from exactmem.model.dataset import load_dataset
    from exactmem.search.sweep import minimize

    ds = load_dataset(args.data)
    if args.minimize:
        report = minimize(ds, base, args.minimize, limits, opts, args.timeout,
                          args.certificates, None if args.quiet else _echo, args.budget,
                          args.bits, args.conflicts, args.proofs, args.solver)
    else:
        report = _single(ds, base, opts, args)
    _print(report, args.json)
    return 0 if report["status"] == "found" else 1


def _echo(res: Any) -> None:
    print(f"  {res.shape.label():28s} params {res.params:4d}  {res.status:10s} "
          f"{res.seconds:7.2f}s", file=sys.stderr, flush=True)


def _single(ds: Any, base: Any, opts: Any, args: argparse.Namespace) -> dict[str, Any]:
    from exactmem.search.query import run_bits_query, run_query

    path = None
    name = base.label().replace(" ", "_")
    if args.certificates is not None:
        args.certificates.mkdir(parents=True, exist_ok=True)
        path = args.certificates / (name + ".cert.json")
    timeout = args.timeout if args.budget is None else min(args.timeout, args.budget)
    if args.bits is not None:
        res = run_bits_query(ds, base, args.bits, args.conflicts, path,
                             None if args.proofs is None else args.proofs / name)
    else:
        res = run_query(ds, base, opts, timeout, path, **args.solver)
    minimal = {**base.as_dict(), "params": res.params} if res.status == "found" else None
    out = {"status": res.status, "minimize": None, "minimal": minimal, "proved_minimal": False,
           "claim": "at most" if minimal else None, "ties": opts.ties,
           "sizes": [res.as_dict()]}
    if args.bits is not None:
        out["bits"] = args.bits
    else:
        out.update(rlimit=args.solver["rlimit"], encoding=args.encoding)
    return out


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, sort_keys=True))
        return
    for e in report["sizes"]:
        sh = e["shape"]
        label = (f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} "
                 f"q{sh['ff_width']} {'res' if sh['residual'] else 'nores'}")
        why = e.get("proof_kind") or e.get("reason") or ""
        extra = f"  {e['certificate']}" if e.get("certificate") else ""
        if e.get("proof"):
            extra = f"  {e['cnf']} {e['proof']}"
        print(f"{label:28s} params {e['params']!s:>5}  {e['status']:10s} "
              f"{e.get('seconds', 0):8.2f}s  {why}{extra}")
    m = report["minimal"]
    if m is None:
        print(f"status: {report['status']}; no memorizing shape found")
    else:
        claim = "minimal" if report["proved_minimal"] else "at most"
        print(f"status: found; {claim}: {m['params']} parameters "
              f"(layers {m['layers']}, heads {m['heads']}, d_model {m['d_model']}, "
              f"head_dim {m['head_dim']}, ff_width {m['ff_width']})")


def _all_labelings(args: argparse.Namespace, base: Any, limits: Any,
                   bound: Fraction | None) -> int:
    from exactmem.errors import DatasetError
    from exactmem.search.executors import make_executor
    from exactmem.search.grid_pool import MAX_FRONTS as GRID_FRONTS
    from exactmem.search.label_sweep import SWEEP_CONFLICTS
    from exactmem.search.labelings import (
        Question,
        ResultsFile,
        generate_inputs,
        shattering_search,
    )
    from exactmem.search.sweep import candidates, caps_hide_nothing
    from exactmem.search.transfer import DEFAULT_POOL

    if args.data:
        from exactmem.model.dataset import load_dataset

        ds = load_dataset(args.data)
        if ds.inputs != "token-ids" or ds.task != "next-token":
            raise DatasetError("--all-labelings needs a next-token dataset of token ids")
        assert ds.vocab_size is not None
        seqs, vocab = tuple(tuple(s) for s in ds.sequences), ds.vocab_size
    else:
        if args.N is None or args.n is None or args.vocab is None:
            raise DatasetError("--all-labelings without a dataset needs --N, --n and --vocab")
        seqs, vocab = generate_inputs(args.N, args.n, args.vocab, args.seed), args.vocab
    q = Question(seqs, vocab, args.classes, args.ties, args.timeout,
                 None if bound is None else str(bound), args.retry_unknown, args.bits,
                 args.conflicts, None if args.proofs is None else str(args.proofs),
                 args.solver["rlimit"], args.solver["cvc5_rlimit"], args.encoding,
                 args.solver["crosscheck"], not args.no_transfer,
                 DEFAULT_POOL if args.random_fronts is None else args.random_fronts,
                 GRID_FRONTS if args.grid_fronts is None else args.grid_fronts,
                 SWEEP_CONFLICTS if args.sweep_conflicts is None else args.sweep_conflicts)
    probe = q.dataset([0] * len(seqs))
    shapes = candidates(base, args.minimize, limits, probe) if args.minimize else [base]
    def caps_ok(params: int) -> bool:
        return bool(caps_hide_nothing(probe, base, limits, params))
    store = ResultsFile(args.results, q.header())
    executor = make_executor(args.executor, args.workers, args.scheduler)
    start = time.monotonic()
    deadline = None if args.budget is None else start + args.budget
    try:
        report = shattering_search(q, shapes, store, executor, args.first_failure,
                                   not args.quiet, args.certificates, deadline,
                                   caps_ok if args.minimize == "params" else None)
    finally:
        executor.close()
    sizes = []
    for s in report["shapes"]:
        status = {True: "found", False: "infeasible", None: "unknown"}[s["shatters"]]
        sizes.append({**s, "status": status})
    out = {"status": report["status"], "minimal": report["minimal"],
           "proved_minimal": report["proved_minimal"], "claim": report["claim"],
           "ties": q.ties, "bound": q.bound, "bits": q.bits, "sizes": sizes,
           "rlimit": q.rlimit, "encoding": q.encoding, "proof_kinds": _kinds(store, sizes),
           "sequences": [list(x) for x in seqs], "vocab": vocab, "classes": args.classes,
           "results": str(args.results), "reused": report["reused"],
           "padded": report["padded"],
           "solved": report["solved"], "seconds": round(time.monotonic() - start, 3)}
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        for e in sizes:
            sh = e["shape"]
            c = e["classes"]
            print(f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} "
                  f"q{sh['ff_width']}  params {e['params']!s:>4}  {e['status']:10s} "
                  f"classes found {c['found']} infeasible {c['infeasible']} "
                  f"unknown {c['unknown']} unanswered {c['unanswered']}")
        m = out["minimal"]
        claim = "minimal" if out["proved_minimal"] else "at most"
        print(f"status: {out['status']}" + (f"; shatters with {claim} {m['params']} parameters"
                                             if m else ""))
        print(f"{out['reused']} answers reused from {args.results}, {out['padded']} from "
              f"padded smaller witnesses, {out['solved']} solved")
    return 0 if out["status"] == "found" else 1


def _kinds(store: Any, sizes: list[dict[str, Any]]) -> dict[str, int]:
    """How many infeasible answers of the swept shapes rest on which proof kind."""
    from exactmem.search.labelings import record_key
    from exactmem.search.shape import Shape

    counts: dict[str, int] = {}
    for rec in store.records.values():
        if rec.get("status") != "infeasible":
            continue
        shape = Shape.from_dict(rec["shape"])
        if any(Shape.from_dict(e["shape"]) == shape for e in sizes) and \
                rec["key"] == record_key(shape, rec.get("labels", [])):
            kind = str(rec.get("proof_kind"))
            counts[kind] = counts.get(kind, 0) + 1
    return counts
