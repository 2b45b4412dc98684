#!/usr/bin/env python3
"""Benchmark: certifying a dense-float32 memorizer against running it (issue target: certify
at most 20x one float32 forward pass on the same data, peak memory at most 2 GB).

For each N (next-token, n = 16, vocab 64, 8 classes, ``generate --seed 1``) it runs, in one
fresh process each and one after the other on this machine:

* ``exactmem certify DATA -c dense-float32 -o CERT [--shards K]``: build, exact evaluation,
  the independent checker with its float32-exact pass, write; wall time and peak resident
  memory of the process and, with ``--shards``, of its largest worker process (each holds
  at most 8,192 sequences' state at a time);
* the certified network exported to ONNX float32 and run in onnxruntime on every sequence
  (scripts/bits_per_param.py's forward pass: batches of 4096, every core onnxruntime takes,
  best of 3): the float32 forward pass, and how many labels it gets right.

    .venv/bin/python scripts/bench_dense_certify.py                 # N = 2^16
    .venv/bin/python scripts/bench_dense_certify.py --exps 12 14 16 --shards 2

Prints one row per N and, with ``--csv``, writes them (docs/results/dense_certify.csv).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIELDS = ["N", "shards", "certify_s", "peak_rss_mb", "worker_peak_rss_mb", "forward_s", "ratio",
          "labels_right", "params_dense", "verified"]


def forward(cert: Path) -> tuple[float, int, int]:
    """onnxruntime float32 seconds (best of 3), labels right, sequences: the forward pass of
    scripts/bits_per_param.py on the certified network."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bits_per_param import _forward

    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )

    doc = read_certificate(cert)
    spec, ds = spec_from_certificate(doc), dataset_from_certificate(doc, cert.parent)
    best, right = _forward(spec, ds)
    return best, right, ds.N


def one(exp: int, shards: int, work: Path) -> dict[str, Any]:
    """Generate, certify in this process (timed), report peak memory."""
    from exactmem.cli import main as cli

    data, cert = work / f"d{exp}.json", work / f"c{exp}.json"
    cli(["generate", "--task", "next-token", "--N", str(2 ** exp), "--n", "16", "--vocab", "64",
         "--classes", "8", "--seed", "1", "-o", str(data), "-q"])
    clock = time.perf_counter()
    code = cli(["certify", str(data), "-c", "dense-float32", "-o", str(cert), "-q",
                "--shards", str(shards)])
    took = time.perf_counter() - clock
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    sizes = json.loads(cert.read_text())["sizes"] if code == 0 else {}
    return {"N": 2 ** exp, "shards": shards, "certify_s": round(took, 2),
            "peak_rss_mb": round(own), "worker_peak_rss_mb": round(worker),
            "params_dense": sizes.get("params_dense"),
            "verified": code == 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exps", type=int, nargs="*", default=[16], help="N = 2^e (default 16)")
    ap.add_argument("--shards", type=int, default=1, help="certify --shards K (default 1)")
    ap.add_argument("--work", help="folder for data and certificates (default: a temporary one)")
    ap.add_argument("--csv", help="write the rows to this CSV")
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], Path(args.work))))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for exp in args.exps:
            print(f"N = 2^{exp}: certify ...", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, __file__, "--one", str(exp), str(args.shards),
                                   "--work", str(work)], stdout=subprocess.PIPE, text=True,
                                  check=True)
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"N = 2^{exp}: onnxruntime float32 forward ...", file=sys.stderr, flush=True)
            fwd, right, total = forward(work / f"c{exp}.json")
            row.update(forward_s=round(fwd, 3), ratio=round(row["certify_s"] / fwd, 1),
                       labels_right=f"{right}/{total}")
            rows.append(row)
            print("  ".join(f"{k} {row[k]}" for k in FIELDS), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, FIELDS)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
