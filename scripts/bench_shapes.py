"""Benchmark: certify-model and check on real model shapes (GPT-2 small, Pythia-70M, a small
LLaMA), random weights from ``transformers``' own initialisation, self-labelled sequences.

Shapes (``--tiny`` shrinks each to 1 layer, d = 32, vocabulary 64, for the tests):

- ``gpt2-small``: ``GPT2LMHeadModel(GPT2Config())``: 12 layers, d = 768, 12 heads, vocab
  50,257, context 1,024, tied head (124,439,808 parameters);
- ``pythia-70m``: ``GPTNeoXForCausalLM``: 6 layers, d = 512, 8 heads, MLP 2,048, vocab 50,304,
  ``rotary_pct`` 0.25, rotary base 10,000, parallel residual, untied ``embed_out``, context
  2,048 (Pythia-70M's config; 70,426,624 parameters);
- ``llama-small``: ``LlamaForCausalLM``: 4 layers, d = 512, 8 heads, 2 key-value heads
  (grouped-query attention), SwiGLU MLP 1,376, vocab 32,000, ``rope_theta`` 10,000, untied
  head, context 2,048.

``torch.manual_seed(SEED)`` then the model class (the library's initialisation, std 0.02),
``save_pretrained`` (safetensors); S random sequences of T tokens (numpy
``default_rng(SEED)``) labelled at every position with the checkpoint's own float64 argmax
(as scripts/acceptance_arch.py).  Then, each in its own process, timed in this run:

1. the float32 forward pass (the ``transformers`` class, eval, default attention) on the S x
   T tokens: best of 3 after a warm-up, ``--threads`` torch threads (default 1);
2. the producer: ``exactmem certify-model DIR DATA -o CERT --partial --no-self-check
   --bind-weights --bind-dataset`` (one process);
3. with ``--check``: ``exactmem check CERT --shards K`` (K processes; CPU seconds reported);
4. with ``--default``: ``exactmem certify-model DIR DATA -o CERT2 --partial --bind-weights
   --bind-dataset`` (the producer and its in-process check).

Every child runs with ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` set
to ``--threads``: torch and numpy's BLAS on that many threads on both sides.  Wall and CPU
seconds and peak resident memory of each child come from ``os.wait4`` (a child's peak is the
largest of it and its own children, not their sum).  One row is appended to ``--out``
(docs/results/shapes.csv): ratios are wall time over the float32 forward's wall time; the
load average is read before and after.

    python scripts/bench_shapes.py --shape pythia-70m --sequences 1 --tokens 128 --check \\
        --workdir /tmp/shapes
    python scripts/bench_shapes.py --shape gpt2-small --tiny --sequences 2 --tokens 8 \\
        --check --default --workdir /tmp/tiny --out /tmp/tiny/shapes.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
SHAPES = ("gpt2-small", "pythia-70m", "llama-small")
FIELDS = ("date", "commit", "shape", "params", "sequences", "tokens", "positions",
          "float32_right", "certified", "check_verified", "check_verdict", "default_certified",
          "torch_f32_s", "torch_threads", "torch_peak_mb",
          "certify_s", "certify_cpu_s", "certify_peak_mb", "certify_over_torch",
          "check_shards", "check_s", "check_cpu_s", "check_peak_mb", "check_over_torch",
          "check_cpu_over_torch",
          "default_s", "default_cpu_s", "default_peak_mb", "default_over_torch",
          "weights_mb", "cpu", "cores", "load_before", "load_after")


def build(shape: str, tiny: bool) -> Any:
    """The ``transformers`` model of ``shape`` with the library's initialisation (seeded)."""
    import torch
    import transformers as tf

    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=64, vocab_size=64, max_position_embeddings=64)
    torch.manual_seed(SEED)
    if shape == "gpt2-small":
        cfg = tf.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=64) \
            if tiny else tf.GPT2Config()
        return tf.GPT2LMHeadModel(cfg).eval()
    if shape == "pythia-70m":
        base = dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                    intermediate_size=2048, vocab_size=50304, max_position_embeddings=2048)
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
            **(small if tiny else base), rotary_pct=0.25, rotary_emb_base=10000,
            use_parallel_residual=True, hidden_act="gelu", layer_norm_eps=1e-5,
            tie_word_embeddings=False)).eval()
    base = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                intermediate_size=1376, vocab_size=32000, max_position_embeddings=2048)
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        **(small if tiny else base), num_key_value_heads=1 if tiny else 2, rope_theta=10000.0,
        tie_word_embeddings=False)).eval()


def float64_logits(shape: str, path: Path, toks: Any) -> Any:
    """The checkpoint's own float64 logits (the class exactmem cross-checks against)."""
    if shape == "gpt2-small":
        from exactmem.lm.checkpoints.gpt2 import torch_logits

        return torch_logits(path, toks, "float64")
    if shape == "pythia-70m":
        from exactmem.lm.checkpoints.gpt_neox import gpt_neox_logits, load_gpt_neox

        return gpt_neox_logits(path, load_gpt_neox(path), toks)
    from exactmem.lm.checkpoints.llama import llama_logits, load_llama

    return llama_logits(path, load_llama(path), toks)


def prepare(args: argparse.Namespace, work: Path) -> tuple[Path, Path]:
    """Save the model and the self-labelled dataset (both reused when present)."""
    import numpy as np

    from exactmem.model.dataset import Dataset, save_dataset

    model = work / (args.shape + ("-tiny" if args.tiny else ""))
    if not (model / "config.json").exists():
        net = build(args.shape, args.tiny)
        net.save_pretrained(str(model), safe_serialization=True)
    cfg = json.loads((model / "config.json").read_text())
    vocab = int(cfg["vocab_size"])
    toks = np.random.default_rng(SEED).integers(0, vocab, (args.sequences, args.tokens))
    data = work / f"{model.name}-S{args.sequences}-T{args.tokens}.json"
    if not data.exists():
        labels = float64_logits(args.shape, model, toks).argmax(-1)
        save_dataset(Dataset(task="seq2seq", inputs="token-ids", vocab_size=vocab,
                             sequences=tuple(tuple(map(int, s)) for s in toks),
                             labels=tuple(tuple(map(int, r)) for r in labels)), data)
    np.save(data.with_suffix(".tokens.npy"), toks)
    return model, data


def forward_child(model: str, tokens: str, threads: int) -> None:
    """In a child process: the float32 forward's best of 3 after a warm-up, its argmax, and the
    parameter count, as one JSON line."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    torch.set_num_threads(threads)
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    from bench_gpt2_1m import best_forward

    best, top = best_forward(net, torch.as_tensor(np.load(tokens), dtype=torch.long))
    print(json.dumps({"seconds": best, "argmax": top.tolist(),
                      "params": sum(p.numel() for p in net.parameters())}))


def run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd``; its exit code, stdout, wall and CPU seconds, peak RSS (MB) via wait4."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    print(f"$ {' '.join(cmd[1:])}\n  exit {proc.returncode}, {wall:.1f} s wall, "
          f"{ru.ru_utime + ru.ru_stime:.1f} s CPU, peak {ru.ru_maxrss / 1024:.0f} MB",
          flush=True)
    if "forward-child" not in cmd:
        print(out, end="", flush=True)
    return {"rc": proc.returncode, "out": out, "wall": wall,
            "cpu": ru.ru_utime + ru.ru_stime, "peak": ru.ru_maxrss / 1024}


def exactmem(*args: str) -> list[str]:
    return [sys.executable, "-m", "exactmem", *args]


def cpu_name() -> str:
    """The processor's name (bench_gpt2_1m's reading of /proc/cpuinfo)."""
    from bench_gpt2_1m import cpu_name as name

    return name()


def commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "exactmem"], cwd=ROOT,
                               text=True, capture_output=True).stdout.strip()
        return rev + ("+modified" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def claimed(pattern: str, out: str) -> int | str:
    m = re.search(pattern, out)
    return int(m.group(1)) if m else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--shape", choices=SHAPES)
    ap.add_argument("--sequences", type=int, default=1, help="S sequences (default 1)")
    ap.add_argument("--tokens", type=int, default=64, help="T tokens a sequence (default 64)")
    ap.add_argument("--check", action="store_true", help="also time exactmem check CERT")
    ap.add_argument("--shards", type=int, default=1, help="check --shards K (default 1)")
    ap.add_argument("--default", action="store_true",
                    help="also time the default certify-model (with its in-process check)")
    ap.add_argument("--producer", choices=("auto", "fast", "hybrid", "arb"), default="auto")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch / BLAS threads of every child (default 1)")
    ap.add_argument("--tiny", action="store_true",
                    help="1 layer, d = 32, vocabulary 64: the same stages in seconds")
    ap.add_argument("--workdir", type=Path, required=False)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "shapes.csv")
    ap.add_argument("--forward-child", nargs=2, metavar=("MODEL", "TOKENS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.forward_child:
        forward_child(*args.forward_child, args.threads)
        return 0
    if args.shape is None or args.workdir is None:
        ap.error("--shape and --workdir are required")
    t = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t, "MKL_NUM_THREADS": t,
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get(
               "PYTHONPATH")])])}
    os.environ.update({k: env[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    model, data = prepare(args, args.workdir)
    load_before = load()
    fwd = run([sys.executable, __file__, "--threads", t, "--forward-child", str(model),
               str(data.with_suffix(".tokens.npy"))], env)
    if fwd["rc"] != 0:
        raise SystemExit(f"bench_shapes: the float32 forward exited {fwd['rc']}")
    info = json.loads(fwd["out"].strip().splitlines()[-1])
    labels = json.loads(data.read_text())["labels"]
    right = sum(a == b for ra, rb in zip(info["argmax"], labels, strict=True)
                for a, b in zip(ra, rb, strict=True))
    tf = info["seconds"]
    print(f"float32 forward {tf:.3f} s (best of 3, {t} thread(s)); argmax right at {right} "
          f"of {args.sequences * args.tokens} positions", flush=True)
    cert = args.workdir / f"{data.stem}-{args.producer}.json"
    common = ["--partial", "--producer", args.producer, "--bind-weights", "--bind-dataset"]
    prod = run(exactmem("certify-model", str(model), str(data), "-o", str(cert), *common,
                        "--no-self-check"), env)
    if prod["rc"] not in (0, 1):
        raise SystemExit(f"bench_shapes: certify-model exited {prod['rc']}")
    row: dict[str, Any] = {
        "date": started, "commit": commit(),
        "shape": args.shape + (" (tiny)" if args.tiny else ""), "params": info["params"],
        "sequences": args.sequences, "tokens": args.tokens,
        "positions": args.sequences * args.tokens, "float32_right": right,
        "certified": claimed(r"(\d+) of \d+ positions proved by the producer", prod["out"]),
        "torch_f32_s": f"{tf:.3f}", "torch_threads": t, "torch_peak_mb": f"{fwd['peak']:.0f}",
        "certify_s": f"{prod['wall']:.1f}", "certify_cpu_s": f"{prod['cpu']:.1f}",
        "certify_peak_mb": f"{prod['peak']:.0f}",
        "certify_over_torch": f"{prod['wall'] / tf:.1f}", "cpu": cpu_name(),
        "cores": os.cpu_count(), "load_before": load_before}
    weights = cert.with_suffix(".weights.safetensors")
    if weights.exists():
        row["weights_mb"] = f"{weights.stat().st_size / 1e6:.1f}"
    ok = prod["rc"] == 0
    if args.check:
        chk = run(exactmem("check", str(cert), "--shards", str(args.shards)), env)
        verdict = chk["out"].strip().splitlines()[-1] if chk["out"].strip() else ""
        row.update(check_verified=claimed(r"c claim: (\d+) of \d+ positions", chk["out"]),
                   check_verdict=verdict, check_shards=args.shards,
                   check_s=f"{chk['wall']:.1f}", check_cpu_s=f"{chk['cpu']:.1f}",
                   check_peak_mb=f"{chk['peak']:.0f}",
                   check_over_torch=f"{chk['wall'] / tf:.1f}",
                   check_cpu_over_torch=f"{chk['cpu'] / tf:.1f}")
        ok &= verdict == "s VERIFIED" and row["check_verified"] == row["certified"]
    if args.default:
        cert2 = args.workdir / f"{data.stem}-{args.producer}-default.json"
        dft = run(exactmem("certify-model", str(model), str(data), "-o", str(cert2), *common),
                  env)
        row.update(default_certified=claimed(r"certified (\d+) of \d+ positions", dft["out"]),
                   default_s=f"{dft['wall']:.1f}", default_cpu_s=f"{dft['cpu']:.1f}",
                   default_peak_mb=f"{dft['peak']:.0f}",
                   default_over_torch=f"{dft['wall'] / tf:.1f}")
        ok &= dft["rc"] == 0
    row["load_after"] = load()
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    new = not args.out.exists()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
