"""Acceptance run of ``exactmem extract`` (docs/extraction.md): a nanoGPT-style model trained
on this CPU until it memorizes some of 40 training sequences and not others, certified.

    python scripts/acceptance_extract.py [--work DIR] [--steps S] [--d D] [--layers L]

Recipe (seeds fixed): 40 character-level sequences of 64 characters (prefix 32, suffix 32),
random words from a fixed list (``numpy.random.default_rng(7)``), sequence ``i`` occurring
``COUNTS[i % 5]`` times in the training data (duplication 1, 2, 4, 8 or 16), so the
frequent ones are memorized first; vocabulary: the characters of the data
(``vocab.json``); a nanoGPT model (:mod:`exactmem.lm.checkpoints.nanogpt_train`) trained
for ``--steps`` AdamW steps.  Then:

1. ``exactmem extract ckpt.pt data.jsonl --vocab vocab.json --prefix 32 --suffix 32``;
2. ``exactmem check`` on the report's certificate;
3. the outside evaluator: float64 greedy decoding with the training code's own forward pass
   (not exactmem's import): every sequence it reproduces must be extractable or undecided,
   every other not extractable or undecided, and at least 95% decided;
4. one extractable sequence with its suffix token ``FLIP`` replaced: ``exactmem extract`` on it
   must prove it not extractable at that suffix position.

Prints the figures; exit 0 when every acceptance condition holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

K = M = 32
COUNTS = (1, 2, 4, 8, 16)
FLIP = 10
WORDS = ("the of and to in is was that for on with as by at from his her they which "
         "model token greedy prefix suffix memory proof exact bound logit weight layer "
         "river stone cloud paper garden window letter silver quiet orange").split()


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def texts(count: int = 40, length: int = K + M) -> list[str]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(count):
        words: list[str] = []
        while len(" ".join(words)) < length:
            words.append(WORDS[int(rng.integers(len(WORDS)))])
        out.append(" ".join(words)[:length])
    return out


def exactmem(*args: object) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "exactmem", *map(str, args)]
    say("$ exactmem " + " ".join(map(str, args)))
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def float64_decode(ckpt: Path, tokens: np.ndarray) -> np.ndarray:
    """Greedy decoding of ``M`` tokens from the first ``K`` of each row, float64, with the
    training code's forward pass on the saved tensors."""
    import torch

    from exactmem.lm.checkpoints.nanogpt_train import _forward

    saved = torch.load(str(ckpt), weights_only=True)
    a = saved["model_args"]
    sd = {k: v.double() for k, v in saved["model"].items()}
    seq = torch.as_tensor(tokens[:, :K], dtype=torch.long)
    with torch.no_grad():
        for _ in range(M):
            nxt = _forward(sd, seq, a["n_layer"], a["n_embd"], a["n_head"])[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
    return seq[:, K:].numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("acceptance_extract"),
                    help="folder for the data, model, report and certificates")
    ap.add_argument("--steps", type=int, default=600, help="training steps (default 600)")
    ap.add_argument("--d", type=int, default=32, help="model width (default 32)")
    ap.add_argument("--layers", type=int, default=2, help="blocks (default 2)")
    ap.add_argument("--execution", choices=("float32", "bfloat16", "float16"),
                    help="also extract with --execution FORMAT (sequences extractable in "
                         "every float execution of it)")
    args = ap.parse_args()
    from exactmem.lm.checkpoints.nanogpt_train import train_nanogpt

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    data = texts()
    chars = sorted(set("".join(data)))
    (work / "vocab.json").write_text(json.dumps(chars))
    stoi = {c: i for i, c in enumerate(chars)}
    counts = [COUNTS[i % len(COUNTS)] for i in range(len(data))]
    with (work / "data.jsonl").open("w") as fh:
        for text, c in zip(data, counts, strict=True):
            fh.write(json.dumps({"text": text, "count": c}) + "\n")
    tokens = np.array([[stoi[c] for c in t] for t in data])
    train = np.repeat(tokens, counts, axis=0)
    ckpt = work / "ckpt.pt"
    clock = time.perf_counter()
    loss = train_nanogpt(ckpt, train, len(chars), layers=args.layers, d_model=args.d,
                         heads=2, context=K + M - 1, steps=args.steps, seed=0, log=say)
    t_train = time.perf_counter() - clock
    say(f"trained {args.steps} steps in {t_train:.1f} s, last loss {loss:.4f}")

    clock = time.perf_counter()
    run = exactmem("extract", ckpt, work / "data.jsonl", "--vocab", work / "vocab.json",
                   "--prefix", K, "--suffix", M, "--every-length", "-o", work / "report.json",
                   *(("--execution", args.execution) if args.execution else ()))
    t_extract = time.perf_counter() - clock
    say(run.stderr[-2000:])
    if run.returncode:
        print(f"extract failed (exit {run.returncode})")
        return 1
    clock = time.perf_counter()
    chk = exactmem("check", work / "report.cert.json", "-q")
    t_check = time.perf_counter() - clock
    report = json.loads((work / "report.json").read_text())
    decoded = float64_decode(ckpt, tokens)
    reproduces = [bool((decoded[i] == tokens[i, K:]).all()) for i in range(len(tokens))]
    status = [r["status"] for r in report["sequences"]]
    wrong_kind = [i for i, (s, ok) in enumerate(zip(status, reproduces, strict=True))
                  if (ok and s == "not extractable") or (not ok and s == "extractable")]
    decided = sum(s != "undecided" for s in status)
    by_count = {c: [status[i] for i in range(len(status)) if counts[i] == c] for c in COUNTS}

    flip_ok, flip_line = False, "no extractable sequence to flip"
    ext = [i for i, s in enumerate(status) if s == "extractable"]
    if ext:
        i = ext[0]
        text = data[i]
        pos = K + FLIP
        text = text[:pos] + next(c for c in chars if c != text[pos]) + text[pos + 1:]
        (work / "flipped.jsonl").write_text(json.dumps({"text": text}) + "\n")
        f = exactmem("extract", ckpt, work / "flipped.jsonl", "--vocab", work / "vocab.json",
                     "--prefix", K, "--suffix", M, "-o", work / "flipped.json")
        row = json.loads((work / "flipped.json").read_text())["sequences"][0] \
            if f.returncode == 0 else None
        fw = row["first_wrong"] if row else None
        flip_ok = bool(row and row["status"] == "not extractable" and fw
                       and fw["suffix_index"] == FLIP)
        flip_line = (f"sequence {i} with suffix token {FLIP} flipped: "
                     + (f"{row['status']}, first proved wrong at suffix index "
                        f"{fw['suffix_index']} (position {fw['position']}, token "
                        f"{fw['token']!r} = {chars[fw['token']]!r} above the label)"
                        if row and fw else f"extract exit {f.returncode}: {f.stderr[-500:]}"))
        chk2 = exactmem("check", work / "flipped.cert.json", "-q")
        flip_ok = flip_ok and chk2.returncode == 0

    s = report["summary"]
    print(f"model: nanoGPT d={args.d} layers={args.layers} heads=2 vocab={len(chars)}, trained "
          f"{args.steps} steps ({t_train:.1f} s, loss {loss:.4f}) on {len(train)} rows "
          f"(40 sequences x duplication {COUNTS})")
    print(f"extract ({t_extract:.1f} s): {s['extractable']} extractable, "
          f"{s['not_extractable']} not extractable, {s['undecided']} undecided of "
          f"{s['sequences']}; longest proved span {s['longest_proved_span']}"
          + (f"; {s['extractable_every_execution']} extractable in every {args.execution} "
             "execution" if args.execution else ""))
    print(f"float64 greedy decode (training code's forward): {sum(reproduces)} of "
          f"{len(reproduces)} reproduce the suffix")
    for c, ss in by_count.items():
        print(f"  duplication {c:2d}: " + ", ".join(f"{ss.count(x)} {x}" for x in
                                                   ("extractable", "not extractable",
                                                    "undecided")))
    print(f"decided: {decided} of {len(status)} ({100 * decided / len(status):.1f}%); "
          f"verdicts contradicting the float64 decode: {wrong_kind or 'none'}")
    print(f"exactmem check ({t_check:.1f} s): exit {chk.returncode}: "
          + " | ".join(ln for ln in chk.stdout.splitlines() if ln.startswith(("c claim",
                                                                            "s "))))
    print(flip_line)
    ok = (not wrong_kind and decided >= 0.95 * len(status) and chk.returncode == 0
          and flip_ok and 0 < s["extractable"] < len(status))
    print("acceptance: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
