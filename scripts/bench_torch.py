"""Throughput of an exported network (torch on CPU, and on GPU when present; onnxruntime on
CPU) against the exact checker, in sequences per second.

For each N: generate a consistent random dataset, certify it (exact build, exact evaluation,
checker), then time

* ``checker``: the stdlib-only checker re-verifying the certificate (exact);
* ``torch-<device>-<dtype>``: the exported ``nn.Module`` (``predict``: the layers after the
  last attention run on the read positions only) over all N sequences in batches
  (after one warm-up pass; CUDA timings synchronized);
* ``onnxruntime-cpu-<dtype>``: the ONNX export in onnxruntime;

and the fraction of labels each float run gets right.  Prints a table; ``--csv`` writes it.

    python scripts/bench_torch.py --N 256 1024 4096 --device auto
    python scripts/bench_torch.py --N 1024 --max-bits 24 --dtype float32 --device cuda

Progress (certify stages, each timed engine, rows) goes to stderr; ``--quiet`` turns it off.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from exactmem import progress


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def bench_one(N: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from exactmem.checker import check_certificate
    from exactmem.datasets.draw import generate
    from exactmem.exporters.onnx_export import build_model, dataset_array, run_onnx
    from exactmem.exporters.torch import dataset_tensor, dtype_of, to_torch
    from exactmem.pipeline import certify

    ds = generate("next-token", N, args.n, args.vocab, args.classes, seed=args.seed)
    options = {"max_bits": args.max_bits} if args.max_bits else {}
    clock = time.perf_counter()
    outcome = certify(ds, args.construction, options)
    build_s = time.perf_counter() - clock
    if not outcome.report.verified:
        raise SystemExit(f"N = {N}: the checker rejected the network")
    tick, close = progress.hook(f"N = {N}: checker", heartbeat=True)
    clock = time.perf_counter()
    check_certificate(outcome.certificate, progress=tick)
    check_s = time.perf_counter() - clock
    close()
    from exactmem.certificate import spec_from_certificate

    spec = spec_from_certificate(outcome.certificate)
    labels = np.array(ds.labels, dtype=np.int64)
    rows = [{"N": N, "engine": "checker (exact)", "seconds": check_s,
             "seq_per_s": _rate(N, check_s), "labels_correct": 1.0,
             "note": f"certify total {build_s:.2f}s"}]
    devices = ["cpu"]
    if args.device in ("cuda", "auto") and torch.cuda.is_available():
        devices.append("cuda")
    elif args.device == "cuda":
        print("no CUDA device: GPU rows skipped", file=sys.stderr)
    for device in devices:
        for dtype in args.dtype:
            net = to_torch(spec, dtype, device).eval()
            x = dataset_tensor(ds, dtype_of(dtype), device)

            def run_all(net: Any = net, x: torch.Tensor = x) -> torch.Tensor:
                outs = [net.predict(x[s:s + args.batch]) for s in range(0, N, args.batch)]
                return torch.cat(outs)

            with torch.no_grad(), progress.stage(f"N = {N}: torch-{device}-{dtype}"):
                run_all()
                if device == "cuda":
                    torch.cuda.synchronize()
                clock = time.perf_counter()
                for _ in range(args.repeat):
                    got = run_all()
                if device == "cuda":
                    torch.cuda.synchronize()
                secs = (time.perf_counter() - clock) / args.repeat
            correct = float((got.cpu().numpy() == labels).mean())
            rows.append({"N": N, "engine": f"torch-{device}-{dtype}", "seconds": secs,
                         "seq_per_s": _rate(N, secs), "labels_correct": correct, "note": ""})
    for dtype in args.dtype:
        if dtype not in ("float64", "float32"):
            continue
        with progress.stage(f"N = {N}: onnxruntime-cpu-{dtype}"):
            model = build_model(spec, dtype)
            inp = dataset_array(ds, dtype)
            run_onnx(model, inp)
            clock = time.perf_counter()
            for _ in range(args.repeat):
                _, lab = run_onnx(model, inp)
            secs = (time.perf_counter() - clock) / args.repeat
        rows.append({"N": N, "engine": f"onnxruntime-cpu-{dtype}", "seconds": secs,
                     "seq_per_s": _rate(N, secs),
                     "labels_correct": float((lab == labels).mean()),
                     "note": "includes session creation"})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--vocab", type=int, default=16)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--construction", default="lookup")
    p.add_argument("--max-bits", type=int, default=0)
    p.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--csv", default=None)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.quiet:
        progress.configure(quiet=True)
    rows: list[dict[str, Any]] = []
    print(f"{'N':>6} {'engine':<26} {'seconds':>9} {'seq/s':>12} {'labels ok':>9}  note",
          flush=True)
    for N in progress.track(args.N, "bench_torch sizes", unit="N"):
        for r in bench_one(N, args):
            rows.append(r)
            print(f"{r['N']:>6} {r['engine']:<26} {r['seconds']:>9.4f} {r['seq_per_s']:>12.0f} "
                  f"{r['labels_correct']:>9.4f}  {r['note']}", flush=True)
    if args.csv:
        with Path(args.csv).open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
