"""Benchmark: the GPT-2 acceptance case, timed stage by stage.

A random GPT-2 (2 layers, d = 32, 2 heads, vocab 64, context 16, seed 0), N random sequences
of 16 tokens labelled with its own float64 argmax; then, each timed: the checkpoint's torch
float32 forward pass on the same data, the producer's ball-arithmetic bounds (python-flint),
and the stdlib checker on the certificate (one process; --shards splits the sequences).

    python scripts/bench_gpt2_tiny.py --N 200 --workdir /tmp/gpt2bench
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from exactmem.adapters.gpt2 import load_gpt2, torch_logits
from exactmem.adapters.gpt2_random import random_gpt2, self_labelled
from exactmem.certificate.lm import build_lm_certificate, write_lm_certificate
from exactmem.checker.verify import check_file, check_sharded
from exactmem.model.lm_bounds import prove_positions


def forward_seconds(model: Path, toks: np.ndarray) -> float:
    """The torch float32 forward pass alone (model loaded, one warm-up call): best of 5."""
    import torch
    from transformers import GPT2LMHeadModel

    net = GPT2LMHeadModel.from_pretrained(str(model), dtype=torch.float32).eval()
    ids = torch.as_tensor(toks, dtype=torch.long)
    best = float("inf")
    with torch.no_grad():
        net(ids)
        for _ in range(5):
            t0 = time.perf_counter()
            net(ids)
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=200)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--workdir", default="gpt2bench")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = random_gpt2(work / "m", seed=0)
    ds = self_labelled(model, args.N, 16, seed=0)
    toks = np.array(ds.sequences)
    t0 = time.perf_counter()
    torch_logits(model, toks, "float32")
    t_load = time.perf_counter() - t0
    t_torch = forward_seconds(model, toks)
    spec = load_gpt2(model)
    t0 = time.perf_counter()
    pb = prove_positions(spec, ds.sequences, ds.labels)
    t_bounds = time.perf_counter() - t0
    cert = build_lm_certificate(spec, ds, pb.proved, True)
    write_lm_certificate(cert, work / "c.json")
    t0 = time.perf_counter()
    report = check_file(work / "c.json") if args.shards == 1 else \
        check_sharded(str(work / "c.json"), args.shards)
    t_check = time.perf_counter() - t0
    m = args.N * 16
    print(f"params {spec.params}, positions {m}, proved {pb.count} "
          f"({100 * pb.count / m:.2f}%), checker: {report.verdict}")
    print(f"torch float32 forward {t_torch * 1e3:.1f} ms (load + run {t_load:.2f} s) | "
          f"bounds (arb) {t_bounds:.2f} s = {t_bounds / t_torch:.0f}x the forward | "
          f"check {t_check:.2f} s = {t_check / t_bounds:.1f}x bounds | "
          f"load avg {os.getloadavg()[0]:.2f}")
    return 0 if report.verified else 1


if __name__ == "__main__":
    raise SystemExit(main())
