"""Benchmark: the GPT-2 (or nanoGPT) acceptance case, timed stage by stage.

A random GPT-2 (2 layers, d = 32, 2 heads, vocab 64, context 16, seed 0; --shape and --std
change it; --kind nanogpt: the same shape as a nanoGPT checkpoint, erf GELU), N random
sequences labelled with its own float64 argmax; then, each timed: the checkpoint's float32
forward pass on the same data, the producer's bounds (--producer fast: float64 norm balls;
arb: python-flint; hybrid: fast, then arb where it falls short), and the stdlib checker on the
certificate (one process; --shards splits the sequences; --no-check skips it).

    python scripts/bench_gpt2_tiny.py --N 200 --workdir /tmp/gpt2bench
    python scripts/bench_gpt2_tiny.py --N 200 --kind nanogpt --workdir /tmp/nanobench
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy on one thread, as torch below
import numpy as np  # noqa: E402

from exactmem.checker.sharded import check_sharded
from exactmem.checker.verify import check_file
from exactmem.lm.certfile import build_lm_certificate, write_lm_certificate
from exactmem.lm.checkpoints.gpt2 import load_gpt2
from exactmem.lm.checkpoints.nanogpt import load_nanogpt, nanogpt_logits
from exactmem.lm.checkpoints.random_models import random_gpt2, random_nanogpt, self_labelled
from exactmem.lm.decoder import LMSpec
from exactmem.lm.positions import prove_positions


def best_of(step: Callable[[], object], repeat: int = 5) -> float:
    """Seconds of the fastest of ``repeat`` calls after one warm-up call."""
    step()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def bare_forward(spec: LMSpec, toks: np.ndarray) -> Callable[[], object]:
    """The spec's function as plain float32 torch ops (F.layer_norm, causal
    scaled_dot_product_attention, F.gelu): the cheapest float forward pass of the model."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    t = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in spec.tensors.items()}
    zero = torch.zeros(spec.d_model)
    d, h = spec.d_model, spec.heads
    approx = "tanh" if spec.activation == "gelu_tanh" else "none"
    ids = torch.as_tensor(toks, dtype=torch.long)
    b, n = ids.shape

    def ln(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (d,), t[name + ".weight"], t.get(name + ".bias", zero),
                            spec.layer_norm_eps)

    def lin(x: torch.Tensor, name: str) -> torch.Tensor:
        y = x @ t[name + ".weight"]
        return y + t[name + ".bias"] if name + ".bias" in t else y

    def step() -> torch.Tensor:
        with torch.no_grad():
            x = t["wte"][ids] + t["wpe"][:n]
            for i in range(spec.layers):
                p = f"h{i}."
                q, k, v = lin(ln(x, p + "ln1"), p + "attn").split(d, dim=2)
                q, k, v = (u.view(b, n, h, d // h).transpose(1, 2) for u in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + lin(y.transpose(1, 2).reshape(b, n, d), p + "attn.proj")
                x = x + lin(F.gelu(lin(ln(x, p + "ln2"), p + "mlp.fc"), approximate=approx),
                            p + "mlp.proj")
            return ln(x, "lnf") @ t["wte" if spec.tied_head else "head"].T

    return step


def own_forward(model: Path, toks: np.ndarray, kind: str) -> Callable[[], object]:
    """The checkpoint's own float32 forward pass (GPT2LMHeadModel, loaded once; nanoGPT:
    its forward restated in torch, reading the checkpoint each call)."""
    import torch

    if kind == "nanogpt":
        return lambda: nanogpt_logits(model, toks, torch.float32)
    from transformers import GPT2LMHeadModel

    net = GPT2LMHeadModel.from_pretrained(str(model), dtype=torch.float32).eval()
    ids = torch.as_tensor(toks, dtype=torch.long)

    def step() -> object:
        with torch.no_grad():
            return net(ids)

    return step


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=200)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--kind", choices=("gpt2", "nanogpt"), default="gpt2")
    ap.add_argument("--producer", choices=("fast", "hybrid", "arb"), default="fast",
                    help="the producer's arithmetic: float64 numpy balls, or python-flint arb")
    ap.add_argument("--no-check", action="store_true", help="time the producer only")
    ap.add_argument("--shape", default="2,32,2,64,16",
                    help="layers,d_model,heads,vocab,context of the random model")
    ap.add_argument("--std", type=float, default=0.3, help="the random weights' std")
    ap.add_argument("--workdir", default="gpt2bench")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: stable timings on a shared machine)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    shape = dict(zip(("layers", "d_model", "heads", "vocab", "context"),
                     map(int, args.shape.split(",")), strict=True))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.kind == "gpt2":
        model = random_gpt2(work / "m", seed=0, std=args.std, **shape)
    else:
        model = random_nanogpt(work / "m.pt", seed=0, std=args.std, **shape)
    ds = self_labelled(model, args.N, shape["context"], seed=0)
    toks = np.array(ds.sequences)
    spec = load_gpt2(model) if args.kind == "gpt2" else load_nanogpt(model)
    t_own = best_of(own_forward(model, toks, args.kind))
    t_torch = best_of(bare_forward(spec, toks))
    t0 = time.perf_counter()
    pb = prove_positions(spec, ds.sequences, ds.labels, producer=args.producer)
    t_bounds = time.perf_counter() - t0
    m = args.N * shape["context"]
    print(f"params {spec.params}, positions {m}, proved {pb.count} "
          f"({100 * pb.count / m:.2f}%) by the {args.producer} producer")
    print(f"float32 forward: bare torch {t_torch * 1e3:.1f} ms, the checkpoint's own "
          f"{t_own * 1e3:.1f} ms | bounds ({args.producer}) {t_bounds:.3f} s = "
          f"{t_bounds / t_torch:.0f}x bare, {t_bounds / t_own:.0f}x own "
          f"| load avg {os.getloadavg()[0]:.2f}")
    if args.no_check:
        return 0
    cert = build_lm_certificate(spec, ds, pb.proved, True)
    write_lm_certificate(cert, work / "c.json")
    t0 = time.perf_counter()
    report = check_file(work / "c.json") if args.shards == 1 else \
        check_sharded(str(work / "c.json"), args.shards)
    t_check = time.perf_counter() - t0
    print(f"checker: {report.verdict} | check {t_check:.2f} s = "
          f"{t_check / t_bounds:.1f}x bounds")
    return 0 if report.verified else 1


if __name__ == "__main__":
    raise SystemExit(main())
