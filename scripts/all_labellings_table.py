"""Benchmark: every binary labelling of N next-token sequences, real weights, one table.

Runs ``exactmem search --all-labellings`` (resumable: the JSON-lines results file keeps what
was answered) under a deterministic Z3 resource limit, then writes one CSV row per swept
shape: its size, how many labelling classes (and labellings) were found / infeasible /
unknown / unanswered, the proof kinds of its refutations, and the wall time and load
average of the run.

    python scripts/all_labellings_table.py --N 10 --n 2 --vocab 4 --rlimit 50000000 \\
        --results runs/n10.jsonl --out docs/results/all_labelings_n2_N10.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=10)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rlimit", type=int, default=50_000_000)
    ap.add_argument("--cvc5-rlimit", type=int, default=20_000)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=30.0, help="budget of the whole run")
    ap.add_argument("--bits", type=int, default=None,
                    help="b-bit integer weights, decided by SAT with LRAT proofs (then "
                         "--conflicts is the budget and --rlimit is not used)")
    ap.add_argument("--conflicts", type=int, default=1_000_000)
    ap.add_argument("--proofs", type=Path, default=None,
                    help="with --bits: where the CNF files and LRAT proofs are written")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="further options for exactmem search (shape family)")
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "exactmem", "search", "--all-labellings", "--N", str(args.N),
           "--n", str(args.n), "--vocab", str(args.vocab), "--seed", str(args.seed),
           "--minimize", "params", "--first-failure", "--timeout", str(args.timeout),
           "--workers", str(args.workers), "--budget", str(args.minutes * 60),
           "--results", str(args.results), "--json", *args.extra]
    if args.bits is None:
        cmd += ["--rlimit", str(args.rlimit), "--cvc5-rlimit", str(args.cvc5_rlimit)]
    else:
        cmd += ["--bits", str(args.bits), "--conflicts", str(args.conflicts)]
        if args.proofs is not None:
            cmd += ["--proofs", str(args.proofs)]
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    load = os.getloadavg()
    if proc.returncode not in (0, 1):
        print(f"exactmem search failed with exit code {proc.returncode}", file=sys.stderr)
        return 2
    report = json.loads(proc.stdout)
    kinds: dict[str, Counter[str]] = {}
    for line in args.results.read_text().splitlines()[1:]:
        rec = json.loads(line)
        if rec.get("status") == "infeasible":
            label = rec["key"].split("|")[0]
            kinds.setdefault(label, Counter())[str(rec.get("proof_kind"))] += 1
    budget = f"rlimit {args.rlimit}" if args.bits is None else \
        f"{args.bits} bits, conflicts {args.conflicts}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["N", "n", "vocab", "shape", "params", "status", "classes_found",
                    "classes_infeasible", "classes_unknown", "classes_unanswered",
                    "labelings_found", "labelings_infeasible", "labelings_unknown",
                    "proof_kinds", "query_seconds", "budget", "run_status", "claim",
                    "run_wall_s", "load_avg_1_5_15"])
        for e in report["sizes"]:
            sh = e["shape"]
            label = (f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} "
                     f"q{sh['ff_width']} {'res' if sh['residual'] else 'nores'}")
            c, lab = e["classes"], e["labellings"]
            pk = kinds.get(f"{label} {sh['readout']}", Counter())
            w.writerow([args.N, args.n, args.vocab, label, e["params"], e["status"], c["found"],
                        c["infeasible"], c["unknown"], c["unanswered"], lab["found"],
                        lab["infeasible"], lab["unknown"],
                        "; ".join(f"{k} x{v}" for k, v in sorted(pk.items())), e["seconds"],
                        budget, report["status"], report["claim"], round(wall, 1),
                        " ".join(f"{x:.2f}" for x in load)])
    print(f"{report['status']}: {report['minimal']} ({report['claim']}); wall {wall:.0f} s, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; table {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
