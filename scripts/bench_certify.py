#!/usr/bin/env python3
"""Benchmark of the certify pipeline for the lookup construction.

For each N (next-token, n = 16, vocab 64, 8 classes) it measures, in a fresh process:
build time, exact evaluation time, checker time, peak memory (max RSS), and the same
network evaluated in float64 numpy as the speed-of-light reference: with the same algorithm
as the exact pass (distinct columns, breakpoint sweep for the wide scalar-input block), and,
up to ``--dense-max`` sequences, densely (every hidden unit for every sequence).

    .venv/bin/python scripts/bench_certify.py            # N = 1e3, 1e4, 1e5
    .venv/bin/python scripts/bench_certify.py --N 1000 5000

Progress (per row, and per stage within a row) goes to stderr; ``--quiet`` turns it off.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from exactmem import progress


def sweep_float(ff, x: np.ndarray) -> np.ndarray:
    """float64 ``C relu(a x + b) + d`` for scalar x by sorted breakpoints and prefix sums."""
    first, second = ff.layers
    a = np.array([r[0] / first.weight.den for r in first.weight.num])
    b = np.array([r[0] / first.bias.den for r in first.bias.num])
    c = np.array([x_ / second.weight.den for x_ in second.weight.num[0]])
    pos, neg = a > 0, a < 0
    tp, tn = -b[pos] / a[pos], -b[neg] / a[neg]
    op, on = np.argsort(tp), np.argsort(tn)
    tp, tn = tp[op], tn[on]
    p1 = np.concatenate([[0.0], np.cumsum((c[pos] * a[pos])[op])])
    p0 = np.concatenate([[0.0], np.cumsum((c[pos] * b[pos])[op])])
    n1 = np.concatenate([[0.0], np.cumsum((c[neg] * a[neg])[on][::-1])])
    n0 = np.concatenate([[0.0], np.cumsum((c[neg] * b[neg])[on][::-1])])
    ip = np.searchsorted(tp, x, side="left")
    im = len(tn) - np.searchsorted(tn, x, side="right")
    return (p1[ip] + n1[im]) * x + p0[ip] + n0[im]


def float_forward(spec, ds, dense: bool, chunk_cells: int = 20_000_000) -> np.ndarray:
    """float64 evaluation of a uniform-attention network (the lookup pipeline)."""
    from exactmem.model.spec import Attention, Embedding, FeedForward, Linear

    def arr(m):
        return np.array([[x / m.den for x in row] for row in m.num], dtype=np.float64)

    seqs = np.array(ds.sequences, dtype=np.int64)  # (N, n)
    emb = spec.layers[0]
    assert isinstance(emb, Embedding)
    z = arr(emb.table)[:, seqs]  # (m, N, n)
    for layer in spec.layers[1:]:
        if isinstance(layer, Linear):
            w = arr(layer.map.weight)
            z = np.einsum("ij,jbn->ibn", w, z)
            if layer.map.bias is not None:
                z = z + arr(layer.map.bias)[:, :, None]
        elif isinstance(layer, Attention):
            total = 0.0
            for h in layer.heads:
                ov = arr(h.output) @ arr(h.value)
                total = total + np.einsum("ij,jb->ib", ov, z.mean(axis=2))[:, :, None]
            z = z + total if layer.residual else np.broadcast_to(total, z.shape)
        elif isinstance(layer, FeedForward):
            z = z[:, :, -1:]  # only the read position is needed after the last attention
            m, b, n = z.shape
            x = z.reshape(m, b * n)
            if not dense and m == 1 and len(layer.layers) == 2:
                xs, inverse = np.unique(x[0], return_inverse=True)
                z = sweep_float(layer, xs)[inverse].reshape(1, b, n)
                continue
            ws = [(arr(a.weight), None if a.bias is None else arr(a.bias)) for a in layer.layers]
            width = max(w.shape[0] for w, _ in ws)
            step = max(1, chunk_cells // width)
            outs = []
            for s in range(0, x.shape[1], step):
                v = x[:, s:s + step]
                for k, (w, bias) in enumerate(ws):
                    if k:
                        v = np.maximum(v, 0.0)
                    v = w @ v
                    if bias is not None:
                        v = v + bias
                outs.append(v)
            z = np.concatenate(outs, axis=1).reshape(-1, b, n)
    return z[:, :, -1]


def one(N: int, dense_max: int) -> dict[str, float]:  # noqa: N803
    from exactmem.certificate import build_certificate
    from exactmem.checker import check_certificate
    from exactmem.constructions import get
    from exactmem.datasets.draw import generate
    from exactmem.model import evaluate

    with progress.stage(f"N = {N}: generate"):
        ds = generate("next-token", N=N, n=16, vocab=64, classes=8, seed=1)
    t0 = time.perf_counter()
    with progress.stage(f"N = {N}: build"):
        result = get("lookup").build(ds, {"seed": 0})
    t1 = time.perf_counter()
    tick, close = progress.hook(f"N = {N}: evaluate", heartbeat=True)
    ev = evaluate(result.spec, ds, tick)
    close()
    t2 = time.perf_counter()
    assert ev.memorized
    with progress.stage(f"N = {N}: certificate"):
        cert = build_certificate(ds, result, "lookup", ev)
    t3 = time.perf_counter()
    tick, close = progress.hook(f"N = {N}: check", heartbeat=True)
    tick("parse", 0, 0)
    report = check_certificate(cert, progress=tick)
    close()
    t4 = time.perf_counter()
    assert report.verified, report.failures[:3]
    with progress.stage(f"N = {N}: float64"):
        out = float_forward(result.spec, ds, dense=False)
    t5 = time.perf_counter()
    correct = float(np.mean(np.rint(out[0]) == np.array(ds.labels)))
    dense_s = float("nan")
    if N <= dense_max:
        with progress.stage(f"N = {N}: float64 dense"):
            float_forward(result.spec, ds, dense=True)
        dense_s = time.perf_counter() - t5
    return {"N": N, "build_s": t1 - t0, "exact_eval_s": t2 - t1, "check_s": t4 - t3,
            "float64_s": t5 - t4, "float64_dense_s": dense_s, "float64_correct": correct,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--N", type=int, nargs="*", default=[1000, 10_000, 100_000])
    ap.add_argument("--dense-max", type=int, default=10_000,
                    help="largest N for the dense float64 reference (it costs N^2)")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quiet:
        progress.configure(quiet=True)
    if args.one:
        print(json.dumps(one(args.one, args.dense_max)))
        return 0
    cols = ("N", "build s", "exact eval s", "check s", "peak MiB", "float64 s",
            "exact/float", "check/float", "dense f64 s", "f64 correct")
    print(" | ".join(f"{c:>12s}" for c in cols), flush=True)
    env = {**os.environ, **({"EXACTMEM_QUIET": "1"} if progress.is_quiet() else {})}
    rows = progress.task("bench_certify rows", total=len(args.N), unit="row")
    for N in args.N:  # noqa: N806
        rows.update(0, description=f"bench_certify N = {N}")
        proc = subprocess.run([sys.executable, __file__, "--one", str(N), "--dense-max",
                               str(args.dense_max)], stdout=subprocess.PIPE, text=True,
                              check=True, env=env)  # the child's progress: on our stderr
        rows.update()
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        row = (f"{r['N']:>12d}", f"{r['build_s']:12.2f}", f"{r['exact_eval_s']:12.2f}",
               f"{r['check_s']:12.2f}", f"{r['peak_rss_mib']:12.0f}", f"{r['float64_s']:12.2f}",
               f"{r['exact_eval_s'] / r['float64_s']:12.2f}",
               f"{r['check_s'] / r['float64_s']:12.2f}", f"{r['float64_dense_s']:12.2f}",
               f"{r['float64_correct']:12.4f}")
        print(" | ".join(row), flush=True)
    rows.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
