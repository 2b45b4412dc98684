"""Acceptance: certificates for GPT-NeoX and LLaMA-style checkpoints, end to end on the CLI.

Two ``transformers`` models with random weights (``torch.manual_seed(SEED)``, the library's
own initialisation), saved with ``save_pretrained``:

- ``GPTNeoXForCausalLM``: 2 layers, d = 64, 4 heads, ``rotary_pct`` 0.25, parallel residual;
- ``LlamaForCausalLM``: 2 layers, d = 64, 4 heads, 2 key-value heads, MLP width 128.

For each: N sequences of L tokens labelled with the model's own float64 argmax (transformers'
forward pass in float64); then ``exactmem certify-model DIR DATA -o CERT --partial``,
``exactmem check CERT``, ``exactmem info --json CERT``; a changed weight (certificate
re-digested) must be rejected; a changed label (dataset hash and digest recomputed) must
lose exactly that position.  Prints the counts and the wall / CPU time of each step.

    python scripts/acceptance_arch.py --workdir /tmp/arch
    python scripts/acceptance_arch.py --N 10 --L 8 --workdir /tmp/arch-small
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cli(*args: str) -> tuple[int, str, str, float, float]:
    """``python -m exactmem ARGS``: exit code, stdout, stderr, wall and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cpu, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                       text=True, env=env)
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0, children_cpu() - cpu


def save_models(work: Path, vocab: int, context: int, seed: int) -> dict[str, Path]:
    import torch
    import transformers
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    torch.manual_seed(seed)
    neox = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=context, rotary_pct=0.25,
        use_parallel_residual=True)).eval()
    neox.save_pretrained(str(work / "neox"))
    torch.manual_seed(seed)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128,
        max_position_embeddings=context)).eval()
    llama.save_pretrained(str(work / "llama"))
    return {"gpt-neox": work / "neox", "llama": work / "llama"}


def dataset(kind: str, path: Path, count: int, length: int, vocab: int, seed: int) -> Path:
    """The self-labelled dataset file: transformers' own float64 argmax."""
    import numpy as np

    from exactmem.lm.checkpoints.gpt_neox import gpt_neox_logits, load_gpt_neox
    from exactmem.lm.checkpoints.llama import llama_logits, load_llama
    from exactmem.model.dataset import Dataset, save_dataset

    toks = np.random.default_rng(seed).integers(0, vocab, (count, length))
    if kind == "gpt-neox":
        logits = gpt_neox_logits(path, load_gpt_neox(path), toks)
    else:
        logits = llama_logits(path, load_llama(path), toks)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=vocab,
                 sequences=tuple(tuple(map(int, s)) for s in toks),
                 labels=tuple(tuple(map(int, r)) for r in logits.argmax(-1)))
    out = path.parent / f"{path.name}-data.json"
    save_dataset(ds, out)
    return out


def redigest(cert: dict[str, Any]) -> dict[str, Any]:
    """Recompute the dataset hash and the digest the way the checker does."""
    from exactmem.checker.cert_dataset import canonical
    from exactmem.model.dataset import dataset_from_json

    cert["dataset"]["sha256"] = dataset_from_json(cert["dataset"]["data"]).sha256()
    body = {k: v for k, v in cert.items() if k != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    return cert


def claim_count(out: str) -> int | None:
    m = re.search(r"c claim: (\d+) of (\d+) positions", out)
    return int(m.group(1)) if m else None


def run(kind: str, path: Path, data: Path, log: list[str]) -> dict[str, Any]:
    cert = path.parent / f"{path.name}-cert.json"
    row: dict[str, Any] = {"model": kind}
    rc, out, err, wall, cpu = cli("certify-model", str(path), str(data), "-o", str(cert),
                                  "--partial")
    log.append(f"[{kind}] certify-model: exit {rc}, {wall:.1f} s wall, {cpu:.1f} s CPU\n"
               + out + err)
    row.update(certify_rc=rc, certify_wall=wall, certify_cpu=cpu)
    rc, out, err, wall, cpu = cli("check", str(cert))
    log.append(f"[{kind}] check: exit {rc}, {wall:.1f} s wall, {cpu:.1f} s CPU\n" + out + err)
    row.update(check_rc=rc, check_wall=wall, check_cpu=cpu, checked=claim_count(out),
               check_line=out.splitlines()[-1] if out else "")
    rc, out, err, _, _ = cli("info", "--json", str(cert))
    info = json.loads(out) if rc == 0 else {}
    row.update(certified=info.get("certified_positions"), positions=info.get("positions"))
    body = json.loads(cert.read_text())
    # a changed weight: the digest breaks; re-digested, the checker re-proves on the new
    # weights (here the head row of the first claimed label, negated: its positions fall)
    seq = next(i for i, p in enumerate(body["claims"]["positions"]) if p)
    y = body["dataset"]["data"]["labels"][seq][body["claims"]["positions"][seq][0]]
    bad = json.loads(json.dumps(body))
    t = bad["model"]["tensors"]["wte" if body["model"]["tied_head"] else "head"]
    d = t["shape"][1]
    t["values"][y * d:(y + 1) * d] = [str(-int(v)) for v in t["values"][y * d:(y + 1) * d]]
    weight = path.parent / f"{path.name}-weight.json"
    weight.write_text(json.dumps(bad))
    rc, out, err, _, _ = cli("check", str(weight))
    row.update(weight_rc=rc, weight_line=out.strip().splitlines()[-1] if out else "")
    weight.write_text(json.dumps(redigest(bad)))
    rc, out, err, _, _ = cli("check", str(weight))
    row.update(redigested_rc=rc, redigested_lost=err.count("is not proved the unique argmax"))
    # a changed label at a claimed position: that position, and only it, is lost
    bad = json.loads(json.dumps(body))
    pos = bad["claims"]["positions"][seq][0]
    labels = bad["dataset"]["data"]["labels"]
    old = labels[seq][pos]
    labels[seq][pos] = (old + 1) % body["model"]["vocab_size"]
    label = path.parent / f"{path.name}-label.json"
    label.write_text(json.dumps(redigest(bad)))
    rc, out, err, _, _ = cli("check", str(label))
    lost = [ln for ln in err.splitlines() if "is not proved the unique argmax" in ln]
    row.update(label_rc=rc, label_lost=len(lost),
               label_exact=lost == [ln for ln in lost if f"sequence {seq}, position {pos}:" in ln]
               and len(lost) == 1)
    log.append(f"[{kind}] changed weight: exit {row['weight_rc']} (re-digested: exit "
               f"{row['redigested_rc']}, {row['redigested_lost']} positions lost); "
               f"changed label at "
               f"sequence {seq}, position {pos}: exit {rc}, {len(lost)} position(s) lost\n" + err)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--N", type=int, default=100, help="sequences (default 100)")
    ap.add_argument("--L", type=int, default=32, help="tokens per sequence (default 32)")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary (default 256)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--only", choices=("gpt-neox", "llama"), help="one model only")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    models = save_models(args.workdir, args.vocab, max(args.L, 32), args.seed)
    rows, log = [], []
    for kind, path in models.items():
        if args.only and kind != args.only:
            continue
        data = dataset(kind, path, args.N, args.L, args.vocab, args.seed)
        rows.append(run(kind, path, data, log))
    (args.workdir / "log.txt").write_text("\n".join(log))
    ok = True
    for r in rows:
        share = (r["certified"] or 0) / max(r["positions"] or 1, 1)
        good = (r["certify_rc"] == 0 and r["check_rc"] == 0 and share >= 0.98
                and r["checked"] == r["certified"] and r["weight_rc"] == 1
                and r["redigested_rc"] == 1 and r["redigested_lost"] > 0
                and r["label_rc"] == 1 and r["label_exact"])
        ok &= good
        print(f"{r['model']}: certified {r['certified']} of {r['positions']} positions "
              f"({100 * share:.2f}%); certify-model {r['certify_wall']:.1f} s wall / "
              f"{r['certify_cpu']:.1f} s CPU; check {r['check_wall']:.1f} s wall / "
              f"{r['check_cpu']:.1f} s CPU, {r['checked']} verified ({r['check_line']}); "
              f"changed weight: exit {r['weight_rc']} ({r['weight_line']}), re-digested: exit "
              f"{r['redigested_rc']}, {r['redigested_lost']} positions lost; changed label: "
              f"exit {r['label_rc']}, {r['label_lost']} position lost"
              f"{' (exactly that one)' if r['label_exact'] else ''}; "
              f"{'PASS' if good else 'FAIL'}")
    print(f"log: {args.workdir / 'log.txt'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
