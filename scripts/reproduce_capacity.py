"""Certified memorized bits of GPT-2 models trained on uniform random tokens
(Morris et al. 2025, "How much do language models memorize?", section 3, scaled down to a CPU),
three seeds a row, each certificate's SHA-256 recorded.

Usage: ``python scripts/reproduce_capacity.py [--quick] [--out docs/results] [--work DIR]
[--only ROW ...] [--seeds S ...] [--train-only] [--check-shards K]`` trains, certifies and
checks every row of ``ROWS`` for every seed (default 0 1 2); a finished (row, seed) is kept
in ``DIR`` and reused when the script is run again, and the (row, seed) pairs not run are
kept from the CSV in ``--out``.  ``--verify ROW --seeds S`` re-derives one row in a fresh
directory and compares its certificate's SHA-256 with the one the CSV records (exit 0 when
they are equal, 1 when not).  ``--execution FORMAT`` (float32, bfloat16 or float16)
certifies the rows' checkpoints again with the execution claim (``certify-model
--execution FORMAT``: code lengths for every execution of that format,
docs/trained-models.md, "Execution claims"), checks each certificate, and writes the
real-valued against the execution memorized bits to ``capacity_gpt2_execution_<FORMAT>.csv``
in ``--out`` (the table, plot and committed certificates are left as they are).

Recipe (everything fixed by the row and its seed ``s``, so a rerun trains the same model on
the same data):

* data: ``exactmem.uniform-tokens/1`` from seed ``s`` (:mod:`exactmem.datasets.uniform_tokens`,
  recorded in the dataset, so that ``exactmem check`` regenerates it and states memorized
  bits): ``N`` sequences of ``L = S + 1`` tokens uniform over ``V``; position ``t = 0..S-1``
  predicts token ``t + 1`` (token 0 is context only), ``S log2 V`` bits a sequence;
* model: ``transformers.GPT2LMHeadModel`` (``n_positions = S``, ``gelu_new``, tied head,
  ``layer_norm_epsilon = 1e-5``, dropout 0), float32, init from ``torch.manual_seed(s)``;
* training: AdamW (lr 2e-3, betas (0.9, 0.98), weight decay 0), batch 64, cross-entropy on
  all ``S`` positions, full passes over the data in the order of
  ``torch.randperm(generator=torch.Generator().manual_seed(s))``, a linear decay to 0 over
  ``steps`` steps, one torch thread (deterministic on one machine and torch build);
* certification: ``exactmem certify-model MODEL DATA --partial`` (weights embedded), then
  ``exactmem check CERT --shards K`` in a subprocess; the certified bits are the checker's
  lower bound ``sum_i max(0, S log2 V - C_i)`` (docs/memorized-bits.md); ``cert_sha256`` is
  the SHA-256 of the certificate file;
* float estimate: the producer's float64 forward pass of the same weights
  (``exactmem info --json``'s ``float_memorized_bits``), and independently plain torch
  (``GPT2LMHeadModel`` in float64, ``log_softmax``).

Writes ``capacity_gpt2.csv`` (one line per row and seed), ``capacity_gpt2_summary.csv``
(per row: seeds, mean, min and max), ``capacity_gpt2.png``, and the gzip certificate of each
(row, seed) whose compressed size is at most ``COMMIT_LIMIT`` bytes
(``capacity_gpt2_<row>_seed<s>.json.gz``; ``cert_file`` in the CSV names it, empty where only
the hash is kept).  Progress on stderr.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


class Row(NamedTuple):
    """One configuration of the table: model shape, data shape, training budget."""

    name: str
    d: int
    layers: int
    heads: int
    vocab: int
    length: int  # tokens a sequence, L = S + 1
    n: int  # sequences
    steps: int

    @property
    def key(self) -> str:
        """The row's name on the command line and in ``--work``: ``d28L2_V64_S16_N2048_s25000``."""
        return f"{self.name}_V{self.vocab}_S{self.length - 1}_N{self.n}_s{self.steps}"

    @property
    def params(self) -> int:
        """Dense parameters of the tied-head GPT-2 (embeddings, blocks, final LayerNorm)."""
        d = self.d
        return self.layers * (12 * d * d + 13 * d) + (self.vocab + self.length - 1) * d + 2 * d

    @property
    def bits_per_sequence(self) -> float:
        return (self.length - 1) * math.log2(self.vocab)


ROWS: list[Row] = [
    Row("d28L2", 28, 2, 2, 64, 17, 128, 1500),
    Row("d28L2", 28, 2, 2, 64, 17, 2048, 25000),
    Row("d48L2", 48, 2, 2, 2048, 65, 64, 500),
]
QUICK: list[Row] = [Row("d28L2", 28, 2, 2, 64, 17, 32, 400),
                    Row("d16L1", 16, 1, 2, 2048, 65, 4, 200)]
SEEDS = (0, 1, 2)
COMMIT_LIMIT = 2_000_000  # bytes of a gzip certificate committed beside the CSV
MORRIS = {"fp32": 3.83, "all": 3.6, "bf16": 3.51}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def tokens(row: Row, seed: int) -> np.ndarray:
    """The row's ``N x L`` tokens, ``exactmem.uniform-tokens/1`` from ``seed``."""
    from exactmem.datasets.uniform_tokens import uniform_rows

    return np.array(uniform_rows(seed, row.vocab, row.n, row.length), dtype=np.int64)


def train(path: Path, row: Row, seed: int, data: np.ndarray) -> float:
    """Train the row's GPT-2 on ``data`` and save it to ``path``; returns the seconds taken."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=row.vocab, n_positions=row.length - 1, n_embd=row.d,
                     n_layer=row.layers, n_head=row.heads, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / row.steps))
    x = torch.tensor(data, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    clock = time.perf_counter()
    step, loss, shown = 0, float("nan"), 0
    while step < row.steps:
        for idx in torch.randperm(len(x), generator=gen).split(64):
            batch = x[idx]
            logits = model(batch[:, :-1]).logits
            out = torch.nn.functional.cross_entropy(logits.reshape(-1, row.vocab),
                                                    batch[:, 1:].reshape(-1))
            opt.zero_grad()
            out.backward()
            opt.step()
            sched.step()
            step += 1
            loss = float(out.detach())
            if step >= row.steps:
                break
        if step - shown >= 500 or step >= row.steps:
            shown = step
            say(f"  train step {step}/{row.steps}: loss {loss:.4f} nats/token")
    model.save_pretrained(str(path))
    return time.perf_counter() - clock


def torch_float64_sums(path: Path, row: Row, data: np.ndarray) -> tuple[float, float]:
    """``(clipped, unclipped)`` memorized bits, ``sum_i max(0, S log2 V - C_i)`` and
    ``sum_i (S log2 V - C_i)``, from the checkpoint's own forward pass in float64 with
    ``log_softmax`` (plain torch, independent of exactmem)."""
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(path)).double().eval()
    x = torch.tensor(data, dtype=torch.long)
    with torch.no_grad():
        lp = torch.log_softmax(model(x[:, :-1]).logits, dim=-1)
    nll = -lp.gather(-1, x[:, 1:, None])[..., 0].sum(-1) / math.log(2)
    h = row.bits_per_sequence
    return float(torch.clamp(h - nll, min=0).sum()), float((h - nll).sum())


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_row(row: Row, seed: int, base: Path, check_shards: int = 1,
            train_only: bool = False, execution: str | None = None) -> dict[str, Any]:
    """Train, certify and check ``row`` with ``seed`` in ``base`` (reusing what is there);
    returns its CSV line (with ``execution``: :func:`execution_line`'s)."""
    from exactmem.api.lm import certify_lm
    from exactmem.datasets.uniform_tokens import uniform_dataset
    from exactmem.lm.certfile import lm_info
    from exactmem.model.dataset import save_dataset

    base.mkdir(parents=True, exist_ok=True)
    tag = f"_{execution}" if execution else ""
    done, cert_path = base / f"row{tag}.json", base / f"cert{tag}.json"
    if done.exists() and cert_path.exists():  # resume: this row was finished
        return dict(json.loads(done.read_text()))
    data = tokens(row, seed)
    timing = base / "train_s.json"
    if not (base / "model" / "config.json").exists():
        say(f"{row.key} seed {seed}: training {row.steps} steps")
        timing.write_text(json.dumps(round(train(base / "model", row, seed, data), 1)))
    t_train = json.loads(timing.read_text())
    if train_only:
        return {}
    save_dataset(uniform_dataset(seed, row.vocab, row.n, row.length), base / "data.json")
    say(f"{row.key} seed {seed}: certifying")
    clock = time.perf_counter()
    res = certify_lm(base / "model", base / "data.json", cert_path, partial=True,
                     bind_weights=False, execution=execution)
    t_cert = time.perf_counter() - clock
    if not res.written:
        raise SystemExit(f"{row.key} seed {seed}: no position proved, nothing certified")
    say(f"{row.key} seed {seed}: checking")
    clock = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "exactmem", "check", str(cert_path),
                           "--shards", str(check_shards)],
                          capture_output=True, text=True, check=False)
    t_check = time.perf_counter() - clock
    if proc.returncode != 0 or "s VERIFIED" not in proc.stdout:
        raise SystemExit(f"{row.key} seed {seed}: check failed: {proc.stdout}"
                         f"{proc.stderr[-2000:]}")
    claim = next((s for s in proc.stdout.splitlines() if "memorized bits" in s), "")
    claimed = re.search(r"at least (-?[\d,]+) bits", claim)
    (base / f"check{tag}.txt").write_text(proc.stdout)
    info = lm_info(json.loads(cert_path.read_text()))
    if execution:
        out = execution_line(row, seed, execution, info, proc.stdout, cert_path)
        out.update(certify_s=round(t_cert, 1), check_s=round(t_check, 1))
        done.write_text(json.dumps(out) + "\n")
        return out
    cert_bits = info["certified_memorized_bits"]
    float_bits = info["float_memorized_bits"]
    clipped, unclipped = torch_float64_sums(base / "model", row, data)
    out = {"row": row.key, "seed": seed, "model": row.name, "params": info["params"],
           "d_model": row.d, "layers": row.layers, "V": row.vocab, "S": row.length - 1,
           "N": row.n, "train_steps": row.steps, "reference_bits": info["reference_bits"],
           "float_bits": round(float_bits, 3), "torch_float64_bits": round(clipped, 3),
           "torch_float64_bits_unclipped": round(unclipped, 3),
           "certified_bits": math.floor(cert_bits * 1000) / 1000,
           "certified_bits_unclipped":
               math.floor(info["certified_memorized_bits_unclipped"] * 1000) / 1000,
           "checker_bits": int(claimed.group(1).replace(",", "")) if claimed else "",
           "checker_says_memorized": "regenerated from seed" in claim,
           "certified_bits_per_param": round(cert_bits / info["params"], 4),
           "certified_positions": info["certified_positions"], "positions": info["positions"],
           "train_s": t_train, "certify_s": round(t_cert, 1), "check_s": round(t_check, 1),
           "check_shards": check_shards, "cert_sha256": sha256_file(base / "cert.json")}
    done.write_text(json.dumps(out) + "\n")
    return out


def execution_line(row: Row, seed: int, fmt: str, info: dict[str, Any], stdout: str,
                   cert: Path) -> dict[str, Any]:
    """The CSV line of a certificate with a ``fmt`` execution claim: the certified
    (real-valued) and execution memorized bits (``exactmem info``), their gap, the
    checker's two claims in whole bits, and the positions claimed for each; the execution
    columns are empty when no code length is proved for every execution."""
    lines = [s for s in stdout.splitlines() if "memorized bits" in s]
    said = [re.search(r"at least (-?[\d,]+) bits", s) for s in lines]
    real = info["certified_memorized_bits"]
    ex = info.get("execution_memorized_bits")
    return {"row": row.key, "seed": seed, "execution": fmt, "params": info["params"],
            "reference_bits": info["reference_bits"],
            "certified_bits": math.floor(real * 1000) / 1000,
            "execution_bits": "" if ex is None else math.floor(ex * 1000) / 1000,
            "gap_bits": "" if ex is None else round(real - ex, 3),
            "relative_gap": "" if ex is None else f"{(real - ex) / real:.3e}",
            "checker_bits": int(said[0].group(1).replace(",", "")) if said[0] else "",
            "checker_execution_bits":
                int(said[-1].group(1).replace(",", "")) if len(said) > 1 and said[-1] else "",
            "certified_positions": info["certified_positions"],
            "execution_positions": info["execution"]["certified_positions"],
            "positions": info["positions"], "cert_sha256": sha256_file(cert)}


def summarize(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: its seeds, and mean, min and max of the certified bits, bits per parameter
    and positions proved."""
    by_row: dict[str, list[dict[str, Any]]] = {}
    for r in lines:
        by_row.setdefault(str(r["row"]), []).append(r)
    out = []
    for rs in by_row.values():
        first = rs[0]
        s: dict[str, Any] = {k: first[k] for k in ("row", "model", "params", "V", "S", "N",
                                                    "train_steps", "reference_bits")}
        s["seeds"] = " ".join(str(r["seed"]) for r in sorted(rs, key=lambda r: int(r["seed"])))
        for col in ("certified_bits", "certified_bits_per_param", "certified_positions"):
            vals = [float(r[col]) for r in rs]
            s[f"{col}_mean"] = round(sum(vals) / len(vals), 4)
            s[f"{col}_min"], s[f"{col}_max"] = min(vals), max(vals)
        out.append(s)
    return out


def plot(lines: list[dict[str, Any]], path: Path) -> None:
    """Certified bits per parameter of every (row, seed), one column per row, with Morris et
    al.'s bits per parameter at convergence for orientation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(str(r["row"]) for r in lines))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, key in enumerate(keys):
        ys = [float(r["certified_bits_per_param"]) for r in lines if r["row"] == key]
        ax.scatter([i] * len(ys), ys, marker="o", facecolors="none", edgecolors="k", s=50)
        ax.hlines(sum(ys) / len(ys), i - 0.2, i + 0.2, colors="C0")
    for name, value in MORRIS.items():
        if name != "bf16":
            ax.axhline(value, ls="--", lw=1, c="gray")
            ax.text(0.01, value + 0.03, f"{value} at convergence (Morris et al., "
                    f"{'fp32' if name == 'fp32' else 'GPT'})", fontsize=7,
                    transform=ax.get_yaxis_transform())
    params = {str(r["row"]): int(float(r["params"])) for r in lines}
    ax.set_xticks(range(len(keys)), [k.replace("_", " ") + f"\n{params[k]:,} params"
                                     for k in keys], fontsize=7)
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.set_ylim(0, 4.2)
    ax.set_ylabel("certified memorized bits per parameter")
    ax.set_title("GPT-2 on uniform random tokens, certified: best at a budget of s steps "
                 "(each seed a circle, the mean a bar)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def kept_lines(csv_path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The lines of an existing CSV by (row, seed)."""
    if not csv_path.exists():
        return {}
    rows = list(csv.DictReader(csv_path.read_text().splitlines()))
    return {(r["row"], int(r["seed"])): dict(r) for r in rows}


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """``rows`` as CSV, the columns of the widest row (a column a row lacks is left empty)."""
    fields = list(max(rows, key=len))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)


def commit_certificate(src: Path, out: Path, line: dict[str, Any]) -> None:
    """Gzip ``src`` beside the CSV when it is at most :data:`COMMIT_LIMIT` bytes compressed;
    ``line["cert_file"]`` names it (empty: only the hash is kept)."""
    dst = out / f"capacity_gpt2_{line['row']}_seed{line['seed']}.json.gz"
    with src.open("rb") as fi, gzip.GzipFile(dst, "wb", mtime=0) as fo:
        shutil.copyfileobj(fi, fo)
    if dst.stat().st_size <= COMMIT_LIMIT:
        line["cert_file"] = dst.name
    else:
        dst.unlink()
        line["cert_file"] = ""


def verify(row: Row, seed: int, work: Path, csv_path: Path, check_shards: int) -> int:
    """Re-derive ``row`` with ``seed`` in a fresh directory; 0 when its certificate's SHA-256
    is the one ``csv_path`` records, 1 when it differs."""
    recorded = kept_lines(csv_path).get((row.key, seed))
    if recorded is None:
        say(f"error: --verify: {csv_path} records no {row.key} seed {seed}")
        return 2
    base = work / "verify" / f"{row.key}_seed{seed}"
    if base.exists():
        shutil.rmtree(base)
    line = run_row(row, seed, base, check_shards)
    same = line["cert_sha256"] == recorded["cert_sha256"]
    print(f"{row.key} seed {seed}: certificate sha256 {line['cert_sha256']} "
          f"{'equals' if same else 'differs from'} the recorded {recorded['cert_sha256']}")
    return 0 if same else 1


def execution_table(specs: list[Row], seeds: list[int], only: list[str] | None, work: Path,
                    out: Path, check_shards: int, fmt: str,
                    committed: dict[tuple[str, int], dict[str, Any]]) -> int:
    """``--execution FMT``: each (row, seed) certified with the execution claim in ``work``
    (the checkpoint trained there, or reused), one line each in
    ``capacity_gpt2_execution_<FMT>.csv``; ``same_as_table``: the real-valued certified
    bits equal the committed table's (the same checkpoint was rebuilt)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"capacity_gpt2_execution_{fmt}.csv"
    kept = kept_lines(path)  # the (row, seed) lines not run now are kept
    for row in specs:
        for seed in seeds:
            if only is not None and row.key not in only:
                continue
            line = run_row(row, seed, work / f"{row.key}_seed{seed}", check_shards,
                           execution=fmt)
            table = committed.get((row.key, seed))
            line["same_as_table"] = "" if table is None else \
                float(table["certified_bits"]) == line["certified_bits"]
            kept[row.key, seed] = line
            say(json.dumps(line))
            write_csv(sorted(kept.values(), key=lambda r: (str(r["row"]), int(r["seed"]))),
                      path)
    say(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two tiny runs (a smoke test)")
    ap.add_argument("--out", default="docs/results", help="where the CSV, plot, certificates go")
    ap.add_argument("--work", default="capacity_work", help="checkpoints and certificates")
    ap.add_argument("--only", nargs="+", metavar="ROW", default=None,
                    help="run only these rows (e.g. d28L2_V64_S16_N2048_s25000); the other "
                         "lines of the table are kept from the CSV in --out")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), metavar="S",
                    help="the seeds to run (default 0 1 2)")
    ap.add_argument("--verify", metavar="ROW", default=None,
                    help="re-derive ROW for each of --seeds in a fresh directory and compare "
                         "the certificate's SHA-256 with the CSV's")
    ap.add_argument("--train-only", action="store_true",
                    help="train the rows' checkpoints into --work, certify nothing")
    ap.add_argument("--check-shards", type=int, default=1, metavar="K",
                    help="`exactmem check --shards K` for each certificate (default 1)")
    ap.add_argument("--execution", metavar="FORMAT", default=None,
                    help="certify the rows with the execution claim of FORMAT (float32, "
                         "bfloat16, float16) and write real-valued against execution "
                         "memorized bits to capacity_gpt2_execution_FORMAT.csv in --out")
    args = ap.parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    specs = QUICK if args.quick else ROWS
    names = {r.key for r in specs}
    for wanted in (args.only or []) + ([args.verify] if args.verify else []):
        if wanted not in names:
            say(f"error: --only/--verify: no such row {wanted} (rows: {', '.join(sorted(names))})")
            return 2
    if args.check_shards < 1:
        say(f"error: --check-shards: expected a positive number, found {args.check_shards}")
        return 2
    if any(s < 0 for s in args.seeds):
        say(f"error: --seeds: expected seeds >= 0, found {min(args.seeds)}")
        return 2
    if args.execution not in (None, "float32", "bfloat16", "float16"):
        say(f"error: --execution: expected float32, bfloat16 or float16, found "
            f"{args.execution!r}")
        return 2
    if args.execution and (args.verify or args.train_only):
        say("error: --execution: not with --verify or --train-only")
        return 2
    csv_path = out / "capacity_gpt2.csv"
    if args.execution:
        return execution_table(specs, args.seeds, args.only, work, out, args.check_shards,
                               args.execution, kept_lines(csv_path))
    if args.verify:
        row = next(r for r in specs if r.key == args.verify)
        return max(verify(row, s, work, csv_path, args.check_shards) for s in args.seeds)
    out.mkdir(parents=True, exist_ok=True)
    old = kept_lines(csv_path)
    todo = [(r, s) for r in specs for s in args.seeds if args.only is None or r.key in args.only]
    new: dict[tuple[str, int], dict[str, Any]] = {}
    for row, seed in todo:
        base = work / f"{row.key}_seed{seed}"
        line = run_row(row, seed, base, args.check_shards, args.train_only)
        if args.train_only:
            continue
        commit_certificate(base / "cert.json", out, line)
        new[row.key, seed] = line
        say(json.dumps(line))
        merged = {**old, **new}
        order = [(r.key, s) for r in specs for s in sorted({k[1] for k in merged})]
        lines = [merged[k] for k in order if k in merged]
        write_csv(lines, csv_path)  # after every row, so an interrupted run keeps its lines
        write_csv(summarize(lines), out / "capacity_gpt2_summary.csv")
    if args.train_only or not new:
        return 0
    plot(list(kept_lines(csv_path).values()), out / "capacity_gpt2.png")
    say(f"wrote {csv_path}, {out / 'capacity_gpt2_summary.csv'}, {out / 'capacity_gpt2.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
