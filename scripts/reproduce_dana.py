"""Dana et al.'s experiment 1, trained on CPU and certified exactly.

Usage: ``python scripts/reproduce_dana.py [--heads 1 6 11 16 21 26 31] [--seed 0]
[--certificates 1 16 31] [--out docs/results]``

The paper (Dana, Pydi & Chevaleyre, AISTATS 2025, experiment 1; papers.md §4): N = 50
tokens, every one of the N^2 = 2500 bigrams gets a random next token (uniform prior), an
attention-only model with d = d_h = 10 and H heads (:class:`AttentionOnly`: shared
compression, positional embedding after it, one ``nn.MultiheadAttention(d_h, 1)`` per head
with a causal mask, shared decompression, unembedding) is trained with the authors'
recipe: Adam, lr 0.1 with ``LinearLR(start_factor=0.1, end_factor=0.005)`` over the whole
run (so 0.01 -> 5e-4), 2^6 epochs of 2^6 batches of 2^8 bigrams drawn uniformly, cross
entropy of the last position.  Seeds: ``--seed`` draws the next-token table
(``random.Random(seed)``) and initialises and batches the model (``torch.manual_seed``).

Each trained float32 model is then read *exactly* (every float32 is a dyadic rational;
:func:`exactmem.importers.aot_fold.spec_from_aot` composes compression, positions and
projections in exact rationals) and evaluated with rigorous softmax bounds on all 2500
bigrams: a bigram is *certified* when the lower bound of its label's logit beats the upper
bound of every other logit.  The certificate claims exactly the certified bigrams
(``claims.sequences``) and the independent checker re-verifies it.  Written to ``--out``:
``dana_trained.csv`` / ``.md`` (H, parameters, trained float accuracy on all 2500 bigrams,
the paper's last-100-batches figure computed the same way, certified exact accuracy, the
paper's accuracy, times) and ``dana_trained_H{H}.json.gz`` (gzip; ``exactmem check``
reads it) for the ``--certificates`` heads.
Rows are appended as each H finishes, so an interrupted run keeps what it computed.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from exactmem.certificate import build_certificate, certificate_text
from exactmem.certificate.build import claim_subset
from exactmem.checker import check_certificate
from exactmem.constructions.base import BuildResult
from exactmem.exporters.torch import AttentionOnly
from exactmem.importers.aot_fold import spec_from_aot
from exactmem.model.dataset import Dataset
from exactmem.model.interval_verdict import certify_interval, softmax_hint
from exactmem.model.sizes import sizes

N, D, D_H, SEQ = 50, 10, 10, 2
PAPER = {1: 0.130, 6: 0.324, 11: 0.506, 16: 0.685, 21: 0.861, 26: 0.963, 31: 0.997}
FIELDS = ("H", "seed", "params", "float_acc", "float_acc_last100", "certified",
          "certified_acc", "paper_acc", "precision_bits", "max_bits", "train_s", "certify_s",
          "check_s", "checker")


def bigrams(seed: int) -> Dataset:
    """All N^2 bigrams (t1, t2), each with a next token drawn uniformly from N."""
    rng = random.Random(seed)
    seqs = tuple((a, b) for a in range(N) for b in range(N))
    return Dataset("next-token", "token-ids", seqs, tuple(rng.randrange(N) for _ in seqs),
                   vocab_size=N)


def train(ds: Dataset, heads: int, seed: int, epochs: int, batches: int, batch: int,
          ) -> tuple[AttentionOnly, float]:
    """The authors' recipe; returns the model and the mean accuracy of the last 100
    training batches (the paper's figure)."""
    torch.manual_seed(seed)
    model = AttentionOnly(N, D, D_H, heads, SEQ)
    x = torch.tensor(ds.sequences, dtype=torch.int64)
    y = torch.tensor(ds.labels, dtype=torch.int64)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    steps = epochs * batches
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, end_factor=0.005,
                                              total_iters=steps)
    loss_fn = torch.nn.CrossEntropyLoss()
    accs: list[float] = []
    for step in range(steps):
        idx = torch.randint(0, len(ds.sequences), (batch,))
        logits = model(x[idx])
        loss = loss_fn(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        accs.append(float((logits.argmax(-1) == y[idx]).float().mean()))
        if (step + 1) % batches == 0:
            print(f"  H={heads} epoch {(step + 1) // batches}/{epochs} loss {loss.item():.3f}",
                  file=sys.stderr, end="\r")
    print(file=sys.stderr)
    return model, sum(accs[-100:]) / len(accs[-100:])


def certify(model: AttentionOnly, ds: Dataset, heads: int, seed: int,
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The exact spec of the trained model, certified on the bigrams it provably
    memorizes; returns (certificate, figures)."""
    clock = time.perf_counter()
    spec = spec_from_aot(model.state_dict(), SEQ)
    outcome = certify_interval(spec, ds, precisions=(32, 64))
    ids = [i for i, row in enumerate(outcome.evaluation.predictions) if row[0] is not None]
    params = {"model": "Dana et al. experiment-1 attention-only model, trained",
              "N": N, "d": D, "d_h": D_H, "heads": heads, "seed": seed,
              "recipe": "Adam lr 0.1, LinearLR 0.1 -> 0.005, 64 epochs x 64 batches x 256",
              "dtype": "float32"}
    cert = build_certificate(ds, BuildResult(spec, params,
                                             hints={"softmax": softmax_hint(outcome)}),
                             "dana2024-trained", outcome.evaluation)
    if ids:
        claim_subset(cert, ids)
    certify_s = time.perf_counter() - clock
    clock = time.perf_counter()
    report = check_certificate(cert) if ids else None
    figures = {"certified": len(ids), "precision_bits": outcome.precision,
               "max_bits": sizes(spec).max_bits, "certify_s": round(certify_s, 1),
               "check_s": round(time.perf_counter() - clock, 1),
               "checker": report.verdict if report else "nothing to claim"}
    if report is not None and not report.verified:
        raise SystemExit(f"H={heads}: the checker rejected the certificate: "
                         f"{report.failures[:3]}")
    return cert, figures


def float_accuracy(model: AttentionOnly, ds: Dataset) -> float:
    with torch.no_grad():
        pred = model(torch.tensor(ds.sequences, dtype=torch.int64)).argmax(-1)
    return float((pred == torch.tensor(ds.labels)).float().mean())


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# Dana et al. experiment 1, trained on CPU and certified exactly", "",
             "N = 50, d = d_h = 10, all 2500 bigrams with random next tokens; "
             "`scripts/reproduce_dana.py` (recipe and seeds in its docstring). "
             "*float acc*: the trained float32 model's argmax on all 2500 bigrams; "
             "*last 100*: the paper's measure (mean accuracy of the last 100 training "
             "batches); *certified*: bigrams whose label is proved the unique argmax of the "
             "exact model (its float32 weights read as dyadic rationals, softmax by rigorous "
             "bounds), re-verified by the checker; *paper*: the authors' mean over 5 seeds.",
             "", "| H | params | float acc | last 100 | certified | certified acc | paper |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['H']} | {r['params']} | {float(r['float_acc']):.3f} | "
                     f"{float(r['float_acc_last100']):.3f} | {r['certified']} | "
                     f"{float(r['certified_acc']):.3f} | {r['paper_acc']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, nargs="+", default=sorted(PAPER))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--certificates", type=int, nargs="*", default=[1, 16, 31])
    ap.add_argument("--epochs", type=int, default=64)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("docs/results"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    ds = bigrams(args.seed)
    table = args.out / "dana_trained.csv"
    rows: list[dict[str, Any]] = []
    with table.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, FIELDS)
        writer.writeheader()
        for heads in args.heads:
            clock = time.perf_counter()
            model, last100 = train(ds, heads, args.seed, args.epochs, args.batches, args.batch)
            train_s = time.perf_counter() - clock
            cert, fig = certify(model, ds, heads, args.seed)
            row = {"H": heads, "seed": args.seed,
                   "params": sum(p.numel() for p in model.parameters()),
                   "float_acc": round(float_accuracy(model, ds), 4),
                   "float_acc_last100": round(last100, 4), **fig,
                   "certified_acc": round(fig["certified"] / len(ds.sequences), 4),
                   "paper_acc": PAPER.get(heads, ""), "train_s": round(train_s, 1)}
            writer.writerow(row)
            fh.flush()
            rows.append(row)
            print(f"H={heads}: float {row['float_acc']}, certified {row['certified_acc']} "
                  f"({fig['certified']}/2500), paper {row['paper_acc']}; train {train_s:.0f}s, "
                  f"certify {fig['certify_s']}s, check {fig['check_s']}s: {fig['checker']}",
                  flush=True)
            if heads in args.certificates:  # gzip (mtime 0: the same bytes every run)
                path = args.out / f"dana_trained_H{heads}.json.gz"
                path.write_bytes(gzip.compress(certificate_text(cert).encode(), mtime=0))
    (args.out / "dana_trained.md").write_text(markdown(rows))
    print(f"load average {os.getloadavg()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
