"""Benchmark: a GPT-2 of about 1M parameters trained to memorize random sequences, certified
position by position (targets: docs/trained-models.md).

The model: 4 layers, d = 128, 4 heads, vocab 2048, context 64 (1,063,680 parameters with the
tied head), trained on CPU on 1,000 random sequences of 65 tokens (numpy ``default_rng(2048)``,
torch seed 0, AdamW lr 3e-3, betas (0.9, 0.98), batch 50) for 1,900 steps (train argmax
accuracy about 0.95; the measured checkpoint stopped there), or earlier once 99% of the
training positions have the right float32 argmax; trained here only when WORKDIR/gpt2_1m is
absent (two torch threads: float sums may differ from run to run in the last bits).  The
dataset: the next token at each of the 64 positions (scripts/lm_dataset.py).
Then, each timed on this machine in one run:

1. the checkpoint's own float32 forward pass (``GPT2LMHeadModel``) on the 1,000 x 64 tokens,
   the best of 3 after a warm-up, and the positions whose float32 argmax is the label;
2. ``exactmem certify-model MODEL DATA -o CERT --partial --no-self-check`` (the producer's
   proof, written unchecked; --producer picks auto, the default, or fast, hybrid or arb);
3. ``exactmem check CERT --shards K``.

It writes docs/results/gpt2_1m.csv (one row per run: figures, ratios, machine).
``--standin`` runs the same stages on an untrained stand-in of the same shape: random weights
``N(0, 0.05)`` (seed 0) and 1,000 random sequences of 64 tokens labelled with the model's own
float64 argmax (``self_labelled``), so every position's float64 argmax is right by
construction.

    python scripts/bench_gpt2_1m.py --workdir /tmp/lm1m --shards 2
    python scripts/bench_gpt2_1m.py --workdir /tmp/standin --standin
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy on one thread, as torch below
import numpy as np  # noqa: E402

V, N, L = 2048, 1000, 65  # vocabulary, sequences, tokens a sequence (64 predicted positions)
FIELDS = ("date", "model", "producer", "shards", "params", "sequences", "positions",
          "float32_right", "certified", "certified_of_float32_right", "torch_f32_s",
          "certify_s", "check_s",
          "certify_over_torch", "check_over_certify", "verdict", "torch_threads", "cpu",
          "cores", "load_avg_1_5_15")


def train(out: Path, max_steps: int = 1900) -> None:
    """The training recipe (CPU, two threads): ``max_steps`` steps, or 99% train argmax
    accuracy first."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(2)
    torch.manual_seed(0)
    data = np.random.default_rng(2048).integers(0, V, (N, L))
    np.save(str(out) + ".tokens.npy", data)
    cfg = GPT2Config(vocab_size=V, n_positions=L - 1, n_embd=128, n_layer=4, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.0)
    x = torch.tensor(data, dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    step = 0
    while True:
        for idx in torch.randperm(N, generator=gen).split(50):
            b = x[idx]
            lg = model(b[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(lg.reshape(-1, V), b[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 100 == 0 or step >= max_steps:
                model.eval()
                with torch.no_grad():
                    acc = (model(x[:, :-1]).logits.argmax(-1) == x[:, 1:]).float().mean()
                model.train()
                print(f"step {step} loss {loss.item():.4f} acc {acc.item():.4f}", flush=True)
                if acc >= 0.99 or step >= max_steps:
                    model.save_pretrained(out)
                    return


def torch_forward(model: Path, toks: np.ndarray, threads: int) -> tuple[float, np.ndarray]:
    """Seconds of the checkpoint's float32 forward pass (best of 3 after a warm-up) and its
    argmax at every position."""
    import torch
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(threads)
    net = GPT2LMHeadModel.from_pretrained(str(model), dtype=torch.float32).eval()
    return best_forward(net, torch.as_tensor(toks, dtype=torch.long))


def best_forward(net: Any, ids: Any) -> tuple[float, np.ndarray]:
    """The best of 3 timed float32 forward passes of ``net`` on ``ids`` after a warm-up
    (which also gives the argmax at every position)."""
    import torch

    with torch.no_grad():
        top = net(ids).logits.argmax(-1).numpy()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            net(ids)
            best = min(best, time.perf_counter() - t0)
    return best, top


def timed(cmd: list[str]) -> tuple[float, str]:
    """Run ``python -m exactmem ...``; its wall seconds and stdout (stderr passes through)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "exactmem", *cmd], stdout=subprocess.PIPE,
                          text=True, check=False)
    sec = time.perf_counter() - t0
    print(proc.stdout, end="", flush=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench_gpt2_1m: {' '.join(cmd[:2])} exited {proc.returncode}")
    return sec, proc.stdout


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/lm1m")
    ap.add_argument("--producer", choices=("auto", "fast", "hybrid", "arb"), default="auto")
    ap.add_argument("--shards", type=int, default=2, help="check --shards K")
    ap.add_argument("--N", type=int, default=N, help="the first N of the 1,000 sequences")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads of the float32 forward pass (certify-model "
                         "runs on one core)")
    ap.add_argument("--standin", action="store_true",
                    help="an untrained stand-in of the same shape, self-labelled (see above)")
    ap.add_argument("--out", default="docs/results/gpt2_1m.csv")
    args = ap.parse_args()
    from exactmem.lm.tokens import next_token_dataset, read_tokens
    from exactmem.model.dataset import save_dataset

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = work / ("standin" if args.standin else "gpt2_1m")
    if args.standin:
        from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled

        if not (model / "config.json").exists():
            random_gpt2(model, seed=0, layers=4, d_model=128, heads=4, vocab=V,
                        context=L - 1, std=0.05)
        ds = self_labelled(model, args.N, L - 1, seed=0)
    else:
        if not (model / "config.json").exists():
            train(model)
        tokens = np.load(str(model) + ".tokens.npy")[:args.N]
        np.save(work / "bench_tokens.npy", tokens)
        ds = next_token_dataset(read_tokens(str(work / "bench_tokens.npy")), V)
    data = work / "bench_d.json"
    save_dataset(ds, data)
    t_torch, top = torch_forward(model, np.array(ds.sequences), args.threads)
    right = int((top == np.array(ds.labels)).sum())
    positions = ds.N * ds.n
    print(f"float32 forward {t_torch:.3f} s; argmax right at {right} of {positions} positions",
          flush=True)
    cert = work / f"bench_c_{args.producer}.json"
    t_cert, _ = timed(["certify-model", str(model), str(data), "-o", str(cert), "--partial",
                       "--producer", args.producer, "--no-self-check", "--bind-dataset"])
    t_check, out = timed(["check", str(cert), "--shards", str(args.shards)])
    got = re.search(r"c claim: (\d+) of (\d+) positions", out)
    certified = int(got[1]) if got else 0
    verdict = out.strip().splitlines()[-1] if out.strip() else ""
    from exactmem.lm.checkpoints.gpt2 import load_gpt2

    row = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "model": "stand-in (random, self-labelled)" if args.standin else "trained",
           "producer": args.producer, "shards": args.shards, "params": load_gpt2(model).params,
           "sequences": ds.N, "positions": positions, "float32_right": right,
           "certified": certified,
           "certified_of_float32_right": f"{certified / right:.4f}" if right else "",
           "torch_f32_s": f"{t_torch:.3f}", "certify_s": f"{t_cert:.1f}",
           "check_s": f"{t_check:.1f}", "certify_over_torch": f"{t_cert / t_torch:.1f}",
           "check_over_certify": f"{t_check / t_cert:.2f}", "verdict": verdict,
           "torch_threads": args.threads, "cpu": cpu_name(), "cores": os.cpu_count(),
           "load_avg_1_5_15": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    path = Path(args.out)
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    return 0 if verdict == "s VERIFIED" else 1


if __name__ == "__main__":
    raise SystemExit(main())
