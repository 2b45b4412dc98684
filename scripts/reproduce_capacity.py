"""Certified memorized bits of GPT-2 models trained on uniform random tokens
(Morris et al. 2025, "How much do language models memorize?", section 3, scaled down to a CPU).

Usage: ``python scripts/reproduce_capacity.py [--quick] [--out docs/results] [--work DIR]
[--only ROW ...] [--train-only] [--float-only] [--check-shards K]`` (a finished row is kept in
``DIR`` and reused when the script is run again; ``--only d28L2_N2048_s25000 ...`` redoes
those rows and keeps the others from the CSV; ``--train-only`` trains without certifying;
``--float-only`` estimates the training-budget rows ``FLOAT_ROWS`` in float64 only).

Recipe (seeds fixed, so a rerun trains the same models on the same data):

* data: ``N`` sequences of ``L = 17`` tokens drawn uniformly from ``V = 64`` tokens
  (``numpy.random.default_rng(1000 + N)``); position ``t = 0..15`` predicts token ``t + 1``,
  token 0 is not predicted, so the reference entropy is ``16 log2 64 = 96`` bits a sequence;
* model: ``transformers.GPT2LMHeadModel`` (``n_positions = 16``, ``gelu_new``, tied head,
  ``layer_norm_epsilon = 1e-5``, dropout 0), float32, init from ``torch.manual_seed(0)``;
* training: AdamW (lr 2e-3, betas (0.9, 0.98), weight decay 0), batch 64, cross-entropy on all
  16 positions, full passes over the data with a linear decay to 0 over ``steps`` steps, one
  torch thread;
* certification: ``exactmem certify-model MODEL DATA --partial`` (the dataset labels every
  position with its next token, so the certificate carries per-sequence code-length upper
  bounds), then ``exactmem check CERT`` in a subprocess; the certified bits are the checker's
  lower bound ``sum_i max(0, 96 - C_i)`` (docs/memorized-bits.md);
* float estimate: the producer's float64 forward pass of the same weights
  (``exactmem info --json``'s ``float_memorized_bits``), and independently plain torch
  (``GPT2LMHeadModel`` in float64, ``log_softmax``) for the note.

Writes ``capacity_gpt2.csv`` (both sums: ``certified_bits`` is Morris et al.'s per-sample
clipped sum, ``certified_bits_unclipped`` beside it) and ``capacity_gpt2.png`` to ``--out``,
gzip certificates of the two smallest models (``capacity_gpt2_<name>_N<N>.json.gz``), and
with ``--float-only`` ``capacity_gpt2_float.csv``.  Progress on stderr.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

VOCAB, LENGTH = 64, 17
# name, d_model, layers, heads, N, training steps
ROWS: list[tuple[str, int, int, int, int, int]] = [
    ("d28L2", 28, 2, 2, 128, 1500),
    ("d28L2", 28, 2, 2, 512, 3000),
    ("d28L2", 28, 2, 2, 1024, 5000),
    ("d28L2", 28, 2, 2, 1024, 15000),
    ("d28L2", 28, 2, 2, 1024, 25000),
    ("d28L2", 28, 2, 2, 2048, 25000),
    ("d28L2", 28, 2, 2, 4096, 25000),
    ("d28L2", 28, 2, 2, 8192, 25000),
    ("d48L2", 48, 2, 2, 128, 1500),
    ("d48L2", 48, 2, 2, 1024, 16000),
    ("d48L2", 48, 2, 2, 2048, 16000),
    ("d64L4", 64, 4, 4, 48, 800),
    ("d128L3", 128, 3, 4, 16, 400),
]
# trained for the training-budget study, estimated in float64 only (``--float-only``)
FLOAT_ROWS: list[tuple[str, int, int, int, int, int]] = [
    ("d28L2", 28, 2, 2, 8192, 6250),
    ("d28L2", 28, 2, 2, 2048, 12500),
    ("d28L2", 28, 2, 2, 4096, 12500),
    ("d28L2", 28, 2, 2, 8192, 12500),
    ("d28L2", 28, 2, 2, 16384, 25000),
    ("d28L2", 28, 2, 2, 2048, 35000),
    ("d28L2", 28, 2, 2, 4096, 35000),
    ("d28L2", 28, 2, 2, 8192, 35000),
    ("d48L2", 48, 2, 2, 4096, 8000),
    ("d48L2", 48, 2, 2, 4096, 16000),
    ("d48L2", 48, 2, 2, 8192, 16000),
]
QUICK: list[tuple[str, int, int, int, int, int]] = [
    ("d28L2", 28, 2, 2, 32, 400),
    ("d48L2", 48, 2, 2, 32, 400),
]
MORRIS = {"fp32": 3.83, "all": 3.6, "bf16": 3.51}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def tokens(n_seq: int) -> np.ndarray:
    return np.random.default_rng(1000 + n_seq).integers(0, VOCAB, (n_seq, LENGTH))


def train(path: Path, d: int, layers: int, heads: int, data: np.ndarray, steps: int) -> float:
    """Train a GPT-2 on ``data`` and save it to ``path``; returns the seconds taken."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH - 1, n_embd=d, n_layer=layers,
                     n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
    x = torch.tensor(data, dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    clock = time.perf_counter()
    step, loss, shown = 0, float("nan"), 0
    while step < steps:
        for idx in torch.randperm(len(x), generator=gen).split(64):
            batch = x[idx]
            logits = model(batch[:, :-1]).logits
            out = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                    batch[:, 1:].reshape(-1))
            opt.zero_grad()
            out.backward()
            opt.step()
            sched.step()
            step += 1
            loss = float(out.detach())
            if step >= steps:
                break
        if step - shown >= 500 or step >= steps:
            shown = step
            say(f"  train step {step}/{steps}: loss {loss:.4f} nats/token")
    model.save_pretrained(str(path))
    return time.perf_counter() - clock


def torch_float64_bits(path: Path, data: np.ndarray) -> float:
    """Memorized bits, sum_i max(0, 96 - code length_i), from the checkpoint's own forward
    pass in float64 with ``log_softmax`` (plain torch, independent of exactmem)."""
    return torch_float64_sums(path, data)[0]


def torch_float64_sums(path: Path, data: np.ndarray) -> tuple[float, float]:
    """``(clipped, unclipped)``: :func:`torch_float64_bits` and ``sum_i (96 - C_i)``."""
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(path)).double().eval()
    x = torch.tensor(data, dtype=torch.long)
    with torch.no_grad():
        lp = torch.log_softmax(model(x[:, :-1]).logits, dim=-1)
    nll = -lp.gather(-1, x[:, 1:, None])[..., 0].sum(-1) / math.log(2)
    h = (LENGTH - 1) * math.log2(VOCAB)
    return float(torch.clamp(h - nll, min=0).sum()), float((h - nll).sum())


def float_row(row: tuple[str, int, int, int, int, int], work: Path) -> dict[str, Any]:
    """A row's float64 estimate only (plain torch), training the model if it is missing:
    no certificate, for the training-budget study (``FLOAT_ROWS``)."""
    name, d, layers, _, n_seq, steps = row
    t_train = train_row(row, work)
    base = work / key(row)
    clipped, unclipped = torch_float64_sums(base / "model", tokens(n_seq))
    params = layers * (12 * d * d + 13 * d) + (VOCAB + LENGTH - 1) * d + 2 * d  # tied head
    return {"model": name, "params": params, "N": n_seq, "reference_bits": n_seq * 96.0,
            "torch_float64_bits": round(clipped, 3),
            "torch_float64_bits_unclipped": round(unclipped, 3),
            "float_bits_per_param": round(clipped / params, 4), "train_steps": steps,
            "train_s": t_train}


def train_row(row: tuple[str, int, int, int, int, int], work: Path) -> float | str:
    """Train ``row``'s model into ``work`` unless it is there; returns the training seconds
    ("" where a resumed checkpoint has none recorded)."""
    name, d, layers, heads, n_seq, steps = row
    base = work / f"{name}_N{n_seq}_s{steps}"
    base.mkdir(parents=True, exist_ok=True)
    timing = base / "train_s.json"
    if (base / "model" / "config.json").exists():  # resume: trained before
        return json.loads(timing.read_text()) if timing.exists() else ""
    say(f"{name} N={n_seq}: training {steps} steps")
    t_train = round(train(base / "model", d, layers, heads, tokens(n_seq), steps), 1)
    timing.write_text(json.dumps(t_train))
    return t_train


def key(row: tuple[str, int, int, int, int, int]) -> str:
    """A row's name on the command line and in ``--work``: ``d28L2_N1024_s15000``."""
    return f"{row[0]}_N{row[4]}_s{row[5]}"


def run_row(row: tuple[str, int, int, int, int, int], work: Path,
            check_shards: int = 1) -> dict[str, Any]:
    from exactmem.api.lm import certify_lm
    from exactmem.lm.certfile import lm_info
    from exactmem.lm.tokens import next_token_dataset
    from exactmem.model.dataset import save_dataset

    name, d, layers, heads, n_seq, steps = row
    base = work / f"{name}_N{n_seq}_s{steps}"
    done = base / "row.json"
    if done.exists() and (base / "cert.json").exists():  # resume: this row was finished
        return dict(json.loads(done.read_text()))
    data = tokens(n_seq)
    t_train = train_row(row, work)
    save_dataset(next_token_dataset(data, VOCAB), base / "data.json")
    say(f"{name} N={n_seq}: certifying")
    clock = time.perf_counter()
    res = certify_lm(base / "model", base / "data.json", base / "cert.json", partial=True)
    t_cert = time.perf_counter() - clock
    if not res.written:
        raise SystemExit(f"{name} N={n_seq}: no position proved, nothing certified")
    clock = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "exactmem", "check", str(base / "cert.json"),
                           "--shards", str(check_shards)],
                          capture_output=True, text=True, check=False)
    t_check = time.perf_counter() - clock
    if proc.returncode != 0 or "s VERIFIED" not in proc.stdout:
        raise SystemExit(f"{name} N={n_seq}: check failed: {proc.stdout}{proc.stderr[-2000:]}")
    claimed = re.search(r"at least (-?\d+) bits", proc.stdout)
    info = lm_info(json.loads((base / "cert.json").read_text()))
    cert_bits = info["certified_memorized_bits"]
    float_bits = info["float_memorized_bits"]
    out = {"model": name, "params": info["params"], "d_model": d, "layers": layers,
            "N": n_seq, "tokens": n_seq * LENGTH, "reference_bits": info["reference_bits"],
            "float_bits": round(float_bits, 3),
            "torch_float64_bits": round(torch_float64_bits(base / "model", data), 3),
            "certified_bits": math.floor(cert_bits * 1000) / 1000,
            "certified_bits_unclipped":
                math.floor(info["certified_memorized_bits_unclipped"] * 1000) / 1000,
            "float_bits_unclipped": round(info["float_memorized_bits_unclipped"], 3),
            "checker_bits": int(claimed.group(1)) if claimed else "",
            "certified_over_float": round(cert_bits / float_bits, 9) if float_bits else "",
            "certified_bits_per_param": round(cert_bits / info["params"], 4),
            "certified_positions": info["certified_positions"],
            "positions": info["positions"], "train_steps": steps,
            "train_s": t_train, "certify_s": round(t_cert, 1),
            "check_s": round(t_check, 1)}
    done.write_text(json.dumps(out) + "\n")
    return out


def plot(rows: list[dict[str, Any]], path: Path,
         float_rows: list[dict[str, Any]] | None = None) -> None:
    """Left: certified and float64 bits against parameters with Morris et al.'s lines.
    Right: certified bits per parameter against the dataset's bits, one curve per model
    and training budget (the plateau, or how far from it a budget stops); ``float_rows``
    (float64 estimates only) dashed, marked x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5))
    ps = np.array([r["params"] for r in rows], dtype=float)
    xs = np.geomspace(ps.min() * 0.8, ps.max() * 1.25, 50)
    for key_, value in MORRIS.items():
        if key_ != "bf16":
            ax.plot(xs, value * xs, "--", lw=1, label=f"{value} bits/param (Morris et al., "
                                                      f"{'fp32' if key_ == 'fp32' else 'GPT'})")
    ax.scatter(ps, [r["float_bits"] for r in rows], marker="x", s=50, label="float64 estimate")
    ax.scatter(ps, [r["certified_bits"] for r in rows], marker="o", facecolors="none",
               edgecolors="k", s=70, label="certified lower bound")
    ax.scatter(ps, [r["reference_bits"] for r in rows], marker="_", s=120, c="gray",
               label="data entropy (96 bits x N)")
    for r in rows:
        ax.annotate(f"N={int(r['N'])}", (r["params"], r["certified_bits"]), fontsize=7,
                    xytext=(4, -10), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("parameters (dense)")
    ax.set_ylabel("memorized bits")
    ax.set_title("GPT-2 on uniform random tokens (V=64, 16 predicted)")
    ax.legend(fontsize=7)

    names = [str(r["model"]) for r in rows + (float_rows or [])]
    budgets = sorted({(str(r["model"]), int(r["train_steps"])) for r in rows + (float_rows or [])})
    tab20 = matplotlib.colormaps["tab20"]
    colour = {b: tab20(i % 20) for i, b in enumerate(budgets)}  # one per model and budget
    for data, field, style, what in ((rows, "certified_bits_per_param", "o-", "certified"),
                                     (float_rows or [], "float_bits_per_param", "x--",
                                      "float64 only")):
        series: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in data:
            if names.count(str(r["model"])) < 2:  # one dataset size: no curve to show
                continue
            series.setdefault((str(r["model"]), int(r["train_steps"])), []).append(r)
        for (name, steps), rs in sorted(series.items()):
            rs = sorted(rs, key=lambda r: r["N"])
            bx.plot([r["reference_bits"] for r in rs], [r[field] for r in rs], style, ms=4,
                    c=colour[name, steps],
                    label=f"{name} ({int(rs[0]['params']):,} params), {steps:,} steps, {what}")
    for key_, value in MORRIS.items():
        if key_ != "bf16":
            bx.axhline(value, ls="--", lw=1, c="gray")
            bx.text(0.01, value + 0.03, f"{value} (Morris et al., "
                    f"{'fp32' if key_ == 'fp32' else 'GPT'})", fontsize=7,
                    transform=bx.get_yaxis_transform())
    bx.set_xscale("log")
    bx.set_ylim(0, 4.2)
    bx.set_xlabel("data entropy (bits: 96 x N)")
    bx.set_ylabel("memorized bits per parameter")
    bx.set_title("capacity: bits/param against dataset size")
    bx.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def kept_rows(csv_path: Path) -> dict[str, dict[str, Any]]:
    """The rows of an existing CSV by :func:`key` (kept when a run does not redo them; a
    column missing there, such as the unclipped sums of rows written before they were
    recorded, is left empty)."""
    if not csv_path.exists():
        return {}
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    return {f"{r['model']}_N{r['N']}_s{r['train_steps']}": dict(r) for r in rows}


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """``rows`` as CSV, the columns of the widest row (a column a row lacks is left empty)."""
    fields = list(max(rows, key=len))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)


def numeric(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row with its numbers as numbers again (for the plot)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        try:
            out[k] = float(v) if isinstance(v, str) and v else v
        except ValueError:
            out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two tiny runs (a smoke test)")
    ap.add_argument("--out", default="docs/results", help="where the CSV, plot, certificates go")
    ap.add_argument("--work", default="capacity_work", help="checkpoints and certificates")
    ap.add_argument("--only", nargs="+", metavar="ROW", default=None,
                    help="run only these rows (e.g. d28L2_N4096_s25000); the other rows of "
                         "the table are kept from the CSV in --out")
    ap.add_argument("--train-only", action="store_true",
                    help="train the rows' checkpoints into --work, certify nothing")
    ap.add_argument("--float-only", action="store_true",
                    help="the training-budget rows (FLOAT_ROWS): train what is missing, "
                         "write their float64 estimates to capacity_gpt2_float.csv, certify "
                         "nothing")
    ap.add_argument("--check-shards", type=int, default=1, metavar="K",
                    help="`exactmem check --shards K` for each certificate (default 1)")
    args = ap.parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    specs = QUICK if args.quick else FLOAT_ROWS if args.float_only else ROWS
    if args.only is not None:
        unknown = sorted(set(args.only) - {key(r) for r in specs})
        if unknown:
            say(f"error: --only: no such row {unknown[0]} (rows: "
                f"{', '.join(key(r) for r in specs)})")
            return 2
    if args.check_shards < 1:
        say(f"error: --check-shards: expected a positive number, found {args.check_shards}")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "capacity_gpt2.csv"
    float_path = out / "capacity_gpt2_float.csv"
    if args.float_only:
        kept = kept_rows(float_path)
        frows = [float_row(spec, work) if args.only is None or key(spec) in args.only
                 else kept[key(spec)] for spec in specs
                 if args.only is None or key(spec) in args.only or key(spec) in kept]
        write_csv(frows, float_path)
        certified = [numeric(r) for r in kept_rows(csv_path).values()]
        if certified:
            plot(certified, out / "capacity_gpt2.png", [numeric(r) for r in frows])
        say(f"wrote {float_path}")
        return 0
    old = kept_rows(csv_path)
    rows: list[dict[str, Any]] = []
    for at, spec in enumerate(specs):
        if args.only is not None and key(spec) not in args.only:
            if key(spec) in old:
                rows.append(old[key(spec)])
            continue
        if args.train_only:
            train_row(spec, work)
            continue
        rows.append(run_row(spec, work, args.check_shards))
        say(json.dumps(rows[-1]))
        later = [old[key(r)] for r in specs[at + 1:] if key(r) in old]  # kept if interrupted
        write_csv(rows + later, csv_path)
    if args.train_only or not rows:
        return 0
    write_csv(rows, csv_path)
    rows = [numeric(r) for r in rows]
    plot(rows, out / "capacity_gpt2.png", [numeric(r) for r in kept_rows(float_path).values()])
    smallest = sorted({(r["params"], r["model"]) for r in rows})[:2]
    for _, name in smallest:
        r = min((r for r in rows if r["model"] == name), key=lambda r: r["N"])
        src = work / f"{name}_N{int(r['N'])}_s{int(r['train_steps'])}" / "cert.json"
        dst = out / f"capacity_gpt2_{name}_N{int(r['N'])}.json.gz"
        if not src.exists():  # kept from an earlier run: the committed file stays
            continue
        with src.open("rb") as fi, gzip.GzipFile(dst, "wb", mtime=0) as fo:
            shutil.copyfileobj(fi, fo)
    say(f"wrote {csv_path}, {out / 'capacity_gpt2.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
