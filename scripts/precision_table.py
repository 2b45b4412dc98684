#!/usr/bin/env python3
"""Dtype / mantissa table: certify random datasets and run the precision report on each.

    .venv/bin/python scripts/precision_table.py out/precision.csv \\
        lookup:64 lookup:1024 lookup:1024:max_bits=24 kajitsuka2025-next-token:256

Each item is ``construction:N[:option=value,...]``.  Columns: sizes, the memorized fraction per
dtype, the exact minimal mantissa bits (weights rounded / whole pass in MPFR), the sequence that
fails one bit below, and the per-sequence comparison of MPFR p = 53 with torch float64.
Progress (per item, and per stage of certify and of the precision report) goes to stderr;
``--quiet`` turns it off.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from typing import Any

from exactmem import progress
from exactmem.certificate import spec_from_certificate
from exactmem.datasets.draw import generate
from exactmem.datasets.draw_attention import generate_for
from exactmem.floats.fidelity import precision_report
from exactmem.model.dataset import Dataset
from exactmem.pipeline import certify


def dataset_for(con: str, N: int) -> Dataset:  # noqa: N803
    if con in ("mahdavi2024-mha", "dana2024-aot"):
        return generate_for(con, seed=1, N=N)
    if con.endswith("seq2seq"):
        return generate("seq2seq", N, 4, 16, 10, seed=1)
    if con == "vardi2022-relu":
        return generate("next-token", N, 1, 4 * N, 10, seed=1)
    return generate("next-token", N, 8, 16, 10, seed=1)


def row_for(item: str) -> dict[str, Any]:
    parts = item.split(":")
    con, N = parts[0], int(parts[1])  # noqa: N806
    opts = dict((k, int(v)) for k, v in (kv.split("=") for kv in parts[2].split(","))) \
        if len(parts) > 2 and parts[2] else {}
    ds = dataset_for(con, N)
    start = time.time()
    outcome = certify(ds, con, opts)
    if not outcome.report.verified:
        raise SystemExit(f"{item}: not certified: {outcome.report.failures[:3]}")
    rep = precision_report(spec_from_certificate(outcome.certificate), ds,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    sz = outcome.certificate["sizes"]
    row: dict[str, Any] = {"construction": con, "N": N, "n": ds.n,
                           "options": parts[2] if len(parts) > 2 else "",
                           "params_nonzero": sz["params_nonzero"],
                           "params_dense": sz["params_dense"], "depth": sz["depth"],
                           "max_bits": sz["max_bits"]}
    for r in rep.rows:
        row[r.dtype] = round(r.memorized, 4)
    row["p_weights"] = rep.weights.p
    row["p_forward"] = rep.forward.p
    row["fail_at_p_forward_minus_1"] = str(rep.forward.witness)
    row["p53_output_diff"] = len(rep.p53_disagreements or ())
    row["p53_verdict_diff"] = len(rep.p53_verdict_disagreements or ())
    row["seconds"] = round(time.time() - start, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="CSV file to write (rewritten after every row)")
    ap.add_argument("items", nargs="+", help="construction:N[:option=value,...]")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    args = ap.parse_args()
    if args.quiet:
        progress.configure(quiet=True)
    rows = []
    for item in progress.track(args.items, "precision_table items", unit="item"):
        rows.append(row_for(item))
        print(rows[-1], flush=True)
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
